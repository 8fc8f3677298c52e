-- Delete a lock the token holds, and announce it to waiters. The fencing
-- counter stays.
-- KEYS[1] lock hash
-- ARGV[1] token, ARGV[2] channel of release notifications, ARGV[3] the key as
-- clients name it (without the prefix)
-- Returns 1 if the token held the lock, else 0; publishes only on 1.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
