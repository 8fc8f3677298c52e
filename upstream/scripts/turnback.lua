-- Give the turn back: delete each turn key that still holds the token.
-- KEYS the turn keys, ARGV[1] the turn's token.
-- Returns the number of keys deleted.
local n = 0
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then
    n = n + redis.call('DEL', k)
  end
end
return n
