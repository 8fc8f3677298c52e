-- Delete a lock the token holds. The fencing counter stays.
-- KEYS[1] lock hash
-- ARGV[1] token
-- Returns 1 if the token held the lock, else 0.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
