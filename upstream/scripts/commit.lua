-- Raise the node's fencing counter to at least the fence, and record the
-- fence on the lock if the token holds it: exactly, where the committing
-- attempt is the last to have taken or refreshed the hold (the fence the
-- holder is told), else only raising it.
-- KEYS[1] the lock key (holds the token's string while the token holds it),
-- KEYS[2] the layout key (the node's counter, layout.lua), KEYS[3] and
-- KEYS[5] fence-max and fence-floor of layout 1 (read where the node has no
-- counter yet), KEYS[4] the lock's meta (meta.lua's encode)
-- ARGV[1] token, ARGV[2] fence, ARGV[3] the committing attempt ('' none),
-- ARGV[4] how much longer than the key the meta is kept (ms: acquire.lua)
-- Returns 1 if the token holds the lock, else 0.
local fence = tonumber(ARGV[2])
raise(KEYS[2], KEYS[5], KEYS[3], fence)
local got = redis.call('MGET', KEYS[1], KEYS[4]) -- nil for a key of another type
if got[1] ~= ARGV[1] then
  return 0
end
local m = decode(got[2])
local keep = {'KEEPTTL'}
if m.token ~= ARGV[1] then -- lost with its TTL (or layout 2's hash): start it again
  m, keep = blank(), {}
  m.token = ARGV[1]
end
-- The attempt that last landed here records its own fence, even a lower
-- one: a retry granted with its grant's fence by the nodes that still held
-- it, where this node had taken the key anew with a higher counter (the
-- counter stays raised). Any other commit (an earlier attempt's, landing
-- after a later grant's) only raises the fence recorded for the hold.
if ARGV[3] ~= '' and m.attempt == ARGV[3] or fence >= (tonumber(m.fence) or 0) then
  m.fence = ARGV[2]
end
-- The meta gets the key's TTL and the grace; where the key has none (a
-- script persisted it), the meta keeps its own, and one started again has
-- none.
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  keep = {'PX', pttl + tonumber(ARGV[4])}
end
redis.call('SET', KEYS[4], encode(m), unpack(keep))
return 1
