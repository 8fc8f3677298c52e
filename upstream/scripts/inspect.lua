-- Read a lock's entry.
-- KEYS[1] lock hash
-- Returns {token, fence, mode, name, pttl in milliseconds}, or {} when the
-- key is free.
local v = redis.call('HMGET', KEYS[1], 'token', 'fence', 'mode', 'name')
if not v[1] then
  return {}
end
return {v[1], tonumber(v[2]) or 0, v[3] or '', v[4] or '', redis.call('PTTL', KEYS[1])}
