-- Read a lock's entry.
-- KEYS[1] the lock key, KEYS[2] its meta hash (it describes the holder only
-- while its token is the lock key's value)
-- Returns {token, fence, mode, name, pttl in milliseconds}, or {} when the
-- key is free. A key of another type (a client library's lock written by a
-- script) is held by a token lockproxy does not know:
-- {'', 0, '', '', pttl, type}; a string lockproxy did not write has fence 0
-- and mode ''.
local v = redis.pcall('GET', KEYS[1])
if not v then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
if type(v) ~= 'string' then
  return {'', 0, '', '', pttl, redis.call('TYPE', KEYS[1])['ok']}
end
local m = redis.call('HMGET', KEYS[2], 'token', 'fence', 'mode', 'name')
if m[1] ~= v then
  return {v, 0, '', '', pttl}
end
return {v, tonumber(m[2]) or 0, m[3] or '', m[4] or '', pttl}
