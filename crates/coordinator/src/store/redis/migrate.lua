-- Rewrites one campaign's keys into a new layout, in one step, only while the migration
-- holds the campaign lock and nothing committed since the migration read the campaign. Then
-- bumps the campaign version, so that a commit an old coordinator prepared against the old
-- layout conflicts instead of landing, and releases the lock.
--
-- KEYS[1] the version, KEYS[2] the lock, KEYS[3..] the keys written.
-- ARGV[1] the lock token, ARGV[2] the version read ('' when there was none), then writes:
--   S k v               SET k v
--   L k n v1 .. vn      DEL k, then RPUSH k v1 .. vn
--   H k n f1 v1 ..      DEL k, then HSET k f1 v1 .. (n pairs)
-- where k is an index into KEYS. Returns 1 when written, 0 when nothing was (a check failed).

if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[2] then
  return 0
end

-- Items per call, well under Lua's stack limit for unpack.
local SLICE = 1000
local i = 3
while i <= #ARGV do
  local op, k = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  if op == 'S' then
    redis.call('SET', k, ARGV[i + 2])
    i = i + 3
  elseif op == 'L' or op == 'H' then
    local width = 1
    local command = 'RPUSH'
    if op == 'H' then
      width = 2
      command = 'HSET'
    end
    local first = i + 3
    local last = first + tonumber(ARGV[i + 2]) * width - 1
    redis.call('DEL', k)
    local j = first
    while j <= last do
      local upto = math.min(j + SLICE * width - 1, last)
      redis.call(command, k, unpack(ARGV, j, upto))
      j = upto + 1
    end
    i = last + 1
  else
    return redis.error_reply('migrate.lua: unknown write ' .. tostring(op))
  end
end

redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[2])
return 1
