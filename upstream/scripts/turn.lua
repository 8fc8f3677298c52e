-- Take the turn on a script's keys (quorum/turn.go): all of them or none.
-- KEYS the turn keys (<prefix>turn:<key>, one per key of the script),
-- ARGV[1] the turn's token, ARGV[2] its time to live in ms.
-- Returns 1 when the token now holds every key (it may have held some
-- already), else 0 and nothing changed.
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v and v ~= ARGV[1] then
    return 0
  end
end
for _, k in ipairs(KEYS) do
  redis.call('SET', k, ARGV[1], 'PX', ARGV[2])
end
return 1
