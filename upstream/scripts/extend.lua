-- Reset the TTL of a lock the token holds, and record a new mode if given.
-- KEYS[1] lock hash
-- ARGV[1] token, ARGV[2] ttl in milliseconds (0: the lock's own ttl),
-- ARGV[3] mode or ''; 'bound' is the watchdog's renewal, refused once the
-- lock has become a lease
-- Returns the ttl applied, 0 if the token does not hold the lock, or -1 if
-- a renewal of a connection-bound lock finds it a lease.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
if ARGV[3] == 'bound' and redis.call('HGET', KEYS[1], 'mode') == 'lease' then
  return -1
end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl')) or 0
  if ttl <= 0 then
    return 0
  end
else
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ttl)
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'mode', ARGV[3])
end
return ttl
