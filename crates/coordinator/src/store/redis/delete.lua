-- Lanes delete: removes every key of one campaign at once, or nothing.
--
-- The caller took the campaign lock, read the version and the meta (the campaign runs
-- nothing), and named the campaign's keys (they share its {c:<id>} hash tag, so the script
-- touches one Redis Cluster slot). Nothing is deleted if another transaction committed since
-- (the version moved) or another operation holds the lock now. As in a commit, it is the
-- version that protects the data: a lock of the caller's that expired meanwhile is no
-- reason to fail.
--
-- KEYS[1] version, KEYS[2] lock, KEYS[3..] the other keys of the campaign.
-- ARGV[1] the version read ("0" for none), ARGV[2] the caller's lock token.
--
-- Returns the number of keys removed, or -1 (the version moved: retry) or -2 (another
-- operation holds the lock: retry).

local SLICE = 1000

if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then
  return -1
end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then
  return -2
end
local removed = 0
for i = 3, #KEYS, SLICE do
  removed = removed + redis.call('UNLINK', unpack(KEYS, i, math.min(i + SLICE - 1, #KEYS)))
end
-- The version and the lock last: until here, no commit could slip in.
redis.call('UNLINK', KEYS[1], KEYS[2])
return removed
