-- Lanes commit: applies one transaction's writes atomically, or nothing.
--
-- The Rust engine computed the transaction (one operation, or a round of them) from reads of
-- this campaign's keys. This script applies its write set only if no other transaction
-- committed in between (the campaign's version is unchanged) and no other transaction holds
-- the campaign lock; it then bumps the version and releases the lock. Every key is declared
-- in KEYS and shares the campaign's {c:<id>} hash tag, so the script touches a single Redis
-- Cluster slot. It makes no decision: it moves the data it is given.
--
-- KEYS[1] version, KEYS[2] lock, KEYS[3..] keys the ops refer to by index.
-- ARGV[1] expected version, ARGV[2] lock token, ARGV[3] the version to leave (a token unique
-- to this commit, chosen by the committer, so a transaction that expects it builds on this
-- very commit and no other), then ops, each an opcode, a key index and its arguments. Ops that take several items give their count first, and the script applies
-- them with one command per slice of at most SLICE items, not one per item:
--   F k n t1..tn        first scored wins: none of the fields t may exist in hash k yet,
--                       else nothing is written (an error); then HSET k t1 a1 ... (the
--                       attempts follow the fields: F k n t1..tn a1..an)
--   S k v               SET
--   H k n f1 v1 ..      HSET            h k n f1 ..   HDEL
--   Z k n s1 m1 ..      ZADD            z k n m1 ..   ZREM
--   A k n m1 ..         SADD
--   L k keep n v1 ..    RPUSH k v1 .., then keep its last `keep` items (0: DEL k)
--   X k n id f1 v1 ..   XADD k id f1 v1 ..: one stream entry of n fields, holding up to
--                       1000 of a round's items of that stream (id: that of the last,
--                       `0-<seq+1>`); one command, not sliced. The committer writes one
--                       field, `z`: the items packed into one compressed block
--   M k staging         merge a staged hash into k (a rename if k does not exist), then
--                       delete it
--   U k staging         merge a staged sorted set into k with ZADD's meaning (a rename if
--                       k does not exist), then delete it
--
-- Returns 1 (committed; the version is ARGV[3] if anything was written, else unchanged), or
-- -1 (conflict: another transaction committed first; retry) or -2 (another transaction holds
-- the lock; retry).

local SLICE = 1000

-- A large submit's staged key, moved into place in O(1) if `k` does not exist yet (a new
-- campaign), however many entries it holds: a merge of a million blocks Redis for seconds.
-- Answers whether it did; if not, the caller merges the staged entries in.
local function moved_into_place(staging, k)
  if redis.call('EXISTS', k) == 1 then
    return false
  end
  redis.call('RENAME', staging, k)
  -- A rename keeps the staging key's expiry; the campaign's data must not expire.
  redis.call('PERSIST', k)
  return true
end

local version = redis.call('GET', KEYS[1]) or '0'
if version ~= ARGV[1] then
  return -1
end
-- The lock only queues transactions; the version check above is what keeps them atomic, so
-- a commit whose lock expired still applies if nobody committed in between.
-- An optimistic attempt (empty token) holds no lock and must not release anyone's.
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then
  return -2
end

-- Applies `cmd k` to the n items of `per` arguments each starting at ARGV[from], a slice at
-- a time (Lua's unpack has a stack limit).
local function sliced(cmd, k, from, n, per)
  local last = from + n * per - 1
  local step = SLICE * per
  for j = from, last, step do
    redis.call(cmd, k, unpack(ARGV, j, math.min(j + step - 1, last)))
  end
  return last + 1
end

-- First scored wins is checked before anything is written (F comes first when present).
local i = 4
if ARGV[i] == 'F' then
  local k = KEYS[tonumber(ARGV[i + 1])]
  local last = i + 2 + tonumber(ARGV[i + 2])
  for j = i + 3, last, SLICE do
    local got = redis.call('HMGET', k, unpack(ARGV, j, math.min(j + SLICE - 1, last)))
    for x = 1, #got do
      if got[x] then
        return redis.error_reply('LANES scored already set for ' .. ARGV[j + x - 1])
      end
    end
  end
end

local writes = 0
while i <= #ARGV do
  local op = ARGV[i]
  local k = KEYS[tonumber(ARGV[i + 1])]
  if op == 'F' then
    local n = tonumber(ARGV[i + 2])
    local items = {}
    for x = 0, n - 1 do
      items[#items + 1] = ARGV[i + 3 + x]
      items[#items + 1] = ARGV[i + 3 + n + x]
    end
    for j = 1, #items, 2 * SLICE do
      redis.call('HSET', k, unpack(items, j, math.min(j + 2 * SLICE - 1, #items)))
    end
    i = i + 3 + 2 * n
  elseif op == 'S' then
    redis.call('SET', k, ARGV[i + 2]); i = i + 3
  elseif op == 'H' then
    i = sliced('HSET', k, i + 3, tonumber(ARGV[i + 2]), 2)
  elseif op == 'h' then
    i = sliced('HDEL', k, i + 3, tonumber(ARGV[i + 2]), 1)
  elseif op == 'Z' then
    i = sliced('ZADD', k, i + 3, tonumber(ARGV[i + 2]), 2)
  elseif op == 'z' then
    i = sliced('ZREM', k, i + 3, tonumber(ARGV[i + 2]), 1)
  elseif op == 'A' then
    i = sliced('SADD', k, i + 3, tonumber(ARGV[i + 2]), 1)
  elseif op == 'L' then
    local keep = tonumber(ARGV[i + 2])
    local n = tonumber(ARGV[i + 3])
    if n > 0 then
      sliced('RPUSH', k, i + 4, n, 1)
    end
    if keep == 0 then
      redis.call('DEL', k)
    else
      redis.call('LTRIM', k, -keep, -1)
    end
    i = i + 4 + n
  elseif op == 'X' then
    local n = tonumber(ARGV[i + 2])
    redis.call('XADD', k, ARGV[i + 3], unpack(ARGV, i + 4, i + 3 + 2 * n)); i = i + 4 + 2 * n
  elseif op == 'M' then
    -- Merge a staged hash (a large submit's tasks): moved into place for a new campaign, else
    -- copied in slices that fit Lua's unpack (it holds only the amendment's new tasks).
    local staging = KEYS[tonumber(ARGV[i + 2])]
    if not moved_into_place(staging, k) then
      local all = redis.call('HGETALL', staging)
      for j = 1, #all, 2 * SLICE do
        redis.call('HSET', k, unpack(all, j, math.min(j + 2 * SLICE - 1, #all)))
      end
      redis.call('UNLINK', staging)
    end
    i = i + 3
  elseif op == 'U' then
    -- Merge a staged sorted set with ZADD's meaning (a staged score replaces the stored one):
    -- moved into place for a new set, else its members are added in slices, so the cost
    -- follows the staged set, not the (possibly huge) stored one.
    local staging = KEYS[tonumber(ARGV[i + 2])]
    if not moved_into_place(staging, k) then
      local all = redis.call('ZRANGE', staging, 0, -1, 'WITHSCORES')
      local items = {}
      for j = 1, #all, 2 do
        items[#items + 1] = all[j + 1]
        items[#items + 1] = all[j]
      end
      for j = 1, #items, 2 * SLICE do
        redis.call('ZADD', k, unpack(items, j, math.min(j + 2 * SLICE - 1, #items)))
      end
      redis.call('UNLINK', staging)
    end
    i = i + 3
  else
    return redis.error_reply('LANES unknown op ' .. tostring(op))
  end
  writes = writes + 1
end

if writes > 0 then
  redis.call('SET', KEYS[1], ARGV[3])
end
if holder then
  redis.call('DEL', KEYS[2])
end
return 1
