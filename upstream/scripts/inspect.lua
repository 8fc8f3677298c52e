-- Read a lock's entry.
-- KEYS[1] the lock key, KEYS[2] its meta (meta.lua's encode; it describes
-- the holder only while its token is the lock key's value)
-- Returns {token, fence, mode, name, pttl in milliseconds}, or {} when the
-- key is free. A key of another type (a client library's lock written by a
-- script) is held by a token lockproxy does not know:
-- {'', 0, '', '', pttl, type}; a string lockproxy did not write has fence 0
-- and mode ''.
local got = redis.call('MGET', KEYS[1], KEYS[2]) -- nil for a key of another type
local v = got[1]
if not v then
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind == 'none' then
    return {}
  end
  return {'', 0, '', '', redis.call('PTTL', KEYS[1]), kind}
end
local pttl = redis.call('PTTL', KEYS[1])
local m = decode(got[2])
if m.token ~= v then
  return {v, 0, '', '', pttl}
end
return {v, tonumber(m.fence) or 0, m.mode, m.name, pttl}
