-- Reset the TTL of a lock the token holds, and record a new mode if given.
-- KEYS[1] lock hash
-- ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] mode or ''
-- Returns 1 if the token holds the lock, else 0.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'mode', ARGV[3])
end
return 1
