-- Raise the key's fencing counter to at least the fence, and record the fence
-- on the lock if the token holds it.
-- KEYS[1] lock hash, KEYS[2] fencing counter (persistent, no TTL), KEYS[3]
-- the largest counter on the node, raised with it
-- ARGV[1] token, ARGV[2] fence
-- Returns 1 if the token holds the lock, else 0.
local fence = tonumber(ARGV[2])
local counter = tonumber(redis.call('GET', KEYS[2])) or 0
if fence > counter then
  redis.call('SET', KEYS[2], ARGV[2])
end
if fence > (tonumber(redis.call('GET', KEYS[3])) or 0) then
  redis.call('SET', KEYS[3], ARGV[2])
end
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'fence', ARGV[2])
  return 1
end
return 0
