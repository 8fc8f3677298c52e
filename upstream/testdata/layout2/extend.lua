-- Reset the TTL of a lock the token holds, and record a new mode if given.
-- KEYS[1] the lock key (holds the token's string while the token holds it),
-- KEYS[2] the lock's meta hash (token, mode, ttl, ...; it describes the
-- holder only while its token is the lock key's value), KEYS[3] the key's
-- release mark (release.lua, heal.lua)
-- ARGV[1] token, ARGV[2] ttl in milliseconds (0: the lock's own ttl),
-- ARGV[3] mode or ''; 'bound' is the watchdog's renewal, refused once the
-- lock has become a lease, ARGV[4] the attempt the extension is bound to
-- ('' for any hold of the token): only a hold that attempt was the last to
-- take or refresh (the meta hash's attempt) is extended, ARGV[5] how long,
-- in ms, a mark written here lasts ('0': none written)
-- Returns {ttl applied, fence, attempt, mode, name} (the hold as the meta
-- hash records it: fence 0 and '' where it is not known), so that the
-- extender can heal the lock onto nodes where the key is free (heal.lua);
-- {0, at} if the key is free on this node: at is the node's clock in ms,
-- or one more than the key's release mark where that is not below it (the
-- clock stepped back), written as the mark, so that a release after this
-- one marks the key above at whatever the node's clock does (release.lua);
-- {0} if the token does not hold it otherwise; {-1} if a renewal of a
-- connection-bound lock finds it a lease.
local holder = redis.pcall('GET', KEYS[1]) -- a table when the key holds another type
if holder ~= ARGV[1] then
  if holder == false then
    local t = redis.call('TIME')
    local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local mark = tonumber(redis.pcall('GET', KEYS[3])) -- nil unless a number
    if mark and mark >= at then
      at = mark + 1
    end
    if ARGV[5] ~= '0' then
      redis.call('SET', KEYS[3], string.format('%.0f', at), 'PX', ARGV[5])
    end
    return {0, at}
  end
  return {0}
end
local m = redis.call('HMGET', KEYS[2], 'token', 'mode', 'ttl', 'attempt', 'fence', 'name')
if m[1] ~= ARGV[1] then -- the meta hash expired before the key (a script extended the key)
  redis.call('DEL', KEYS[2])
  m = {false, false, false, false, false, false}
end
if ARGV[4] ~= '' and m[4] ~= ARGV[4] then
  return {0}
end
if ARGV[3] == 'bound' and m[2] == 'lease' then
  return {-1}
end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  -- the lock's own ttl; without a meta hash, what the key has left
  ttl = tonumber(m[3]) or redis.call('PTTL', KEYS[1])
  if ttl <= 0 then
    return {0}
  end
end
-- An extension counts the hold toward the extender's majority: like a
-- refresh, it clears took, so that a rollback of the attempt that took the
-- key (a refused retry whose rollback lands after the RENEW) leaves it.
local mode = m[2] or ''
if ARGV[3] ~= '' then
  mode = ARGV[3]
  redis.call('HSET', KEYS[2], 'token', ARGV[1], 'ttl', ttl, 'mode', ARGV[3], 'took', '0')
else
  redis.call('HSET', KEYS[2], 'token', ARGV[1], 'ttl', ttl, 'took', '0')
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {ttl, tonumber(m[5]) or 0, m[4] or '', mode, m[6] or ''}
