-- Take a lock if it is free, or reset its TTL if the token already holds it.
-- Taking a free lock raises the key's fencing counter by one and records the
-- new value as the lock's fence, in the same atomic step.
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] mode, ARGV[4] name
-- Returns {state, counter, fence}: state 1 acquired, 2 already mine, 0 taken;
-- counter as it stands after this step; fence recorded for the holder.
-- The hash keeps the ttl so that a renewal without one reuses it.
local counter = tonumber(redis.call('GET', KEYS[2])) or 0
local holder = redis.call('HGET', KEYS[1], 'token')
if not holder then
  counter = counter + 1
  redis.call('SET', KEYS[2], counter)
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', counter, 'mode', ARGV[3], 'name', ARGV[4], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter, counter}
end
if holder == ARGV[1] then
  redis.call('HSET', KEYS[1], 'mode', ARGV[3], 'name', ARGV[4], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, counter, tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0}
end
return {0, counter, 0}
