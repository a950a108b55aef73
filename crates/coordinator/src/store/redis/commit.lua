-- Lanes commit: applies one store operation's writes atomically, or nothing.
--
-- The Rust engine computed the operation from reads of this campaign's keys. This script
-- applies its write set only if no other operation committed in between (the campaign's
-- version is unchanged) and no other operation holds the campaign lock; it then bumps the
-- version and releases the lock. Every key is declared in KEYS and shares the campaign's
-- {c:<id>} hash tag, so the script touches a single Redis Cluster slot.
--
-- KEYS[1] version, KEYS[2] lock, KEYS[3..] keys the ops refer to by index.
-- ARGV[1] expected version, ARGV[2] lock token, ARGV[3] number of first-score claims N,
-- then N pairs (key index, field) that must not exist yet in the `scored` hash,
-- then ops: an opcode and its fixed arguments.
--
-- Returns 1 (committed), 0 (conflict: retry the operation) or -1 (lock taken: retry).

local version = redis.call('GET', KEYS[1]) or '0'
if version ~= ARGV[1] then
  return 0
end
-- The lock only queues operations; the version check above is what keeps them atomic, so
-- a commit whose lock expired still applies if nobody committed in between.
-- An optimistic attempt (empty token) holds no lock and must not release anyone's.
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then
  return -1
end

local i = 3
local claims = tonumber(ARGV[i]); i = i + 1
for _ = 1, claims do
  local k = KEYS[tonumber(ARGV[i])]
  if redis.call('HEXISTS', k, ARGV[i + 1]) == 1 then
    return redis.error_reply('LANES scored already set for ' .. ARGV[i + 1])
  end
  i = i + 2
end

local writes = 0
while i <= #ARGV do
  local op = ARGV[i]
  local k = KEYS[tonumber(ARGV[i + 1])]
  if op == 'S' then
    redis.call('SET', k, ARGV[i + 2]); i = i + 3
  elseif op == 'D' then
    redis.call('DEL', k); i = i + 2
  elseif op == 'H' then
    redis.call('HSET', k, ARGV[i + 2], ARGV[i + 3]); i = i + 4
  elseif op == 'h' then
    redis.call('HDEL', k, ARGV[i + 2]); i = i + 3
  elseif op == 'N' then
    redis.call('HSETNX', k, ARGV[i + 2], ARGV[i + 3]); i = i + 4
  elseif op == 'Z' then
    redis.call('ZADD', k, ARGV[i + 2], ARGV[i + 3]); i = i + 4
  elseif op == 'z' then
    redis.call('ZREM', k, ARGV[i + 2]); i = i + 3
  elseif op == 'A' then
    redis.call('SADD', k, ARGV[i + 2]); i = i + 3
  elseif op == 'X' then
    redis.call('XADD', k, ARGV[i + 2], 'j', ARGV[i + 3]); i = i + 4
  elseif op == 'M' then
    -- Merge a staged hash (a large submit's tasks) in slices that fit Lua's unpack.
    local staging = KEYS[tonumber(ARGV[i + 2])]
    local all = redis.call('HGETALL', staging)
    for j = 1, #all, 1000 do
      redis.call('HSET', k, unpack(all, j, math.min(j + 999, #all)))
    end
    redis.call('DEL', staging); i = i + 3
  elseif op == 'U' then
    -- Merge a staged sorted set with ZADD's meaning: a staged score replaces the stored one
    -- (ZUNIONSTORE alone would add the two up), so drop the staged members first.
    local staging = KEYS[tonumber(ARGV[i + 2])]
    redis.call('ZDIFFSTORE', k, 2, k, staging)
    redis.call('ZUNIONSTORE', k, 2, k, staging)
    redis.call('DEL', staging); i = i + 3
  else
    return redis.error_reply('LANES unknown op ' .. tostring(op))
  end
  writes = writes + 1
end

if writes > 0 then
  redis.call('INCR', KEYS[1])
end
if holder then
  redis.call('DEL', KEYS[2])
end
return 1
