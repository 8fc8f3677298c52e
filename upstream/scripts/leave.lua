-- Take a waiter out of a key's line, and announce it: the next waiter may go.
-- KEYS[1] waiting line, KEYS[2] line deadlines
-- ARGV[1] waiter id, ARGV[2] channel of release notifications, ARGV[3] the
-- key as clients name it (without the prefix)
-- Returns 1 if the waiter was in line, else 0; publishes only on 1, as
-- release.lua does ('<length of id>:<id><key>').
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[2], string.len(ARGV[1]) .. ':' .. ARGV[1] .. ARGV[3])
return 1
