-- Reset the TTL of a lock the token holds, and record a new mode if given.
-- KEYS[1] the lock key (holds the token's string while the token holds it),
-- KEYS[2] the lock's meta (meta.lua's encode: token, mode, ttl, ...; it
-- describes the holder only while its token is the lock key's value), KEYS[3] the key's
-- release mark (release.lua, heal.lua)
-- ARGV[1] token, ARGV[2] ttl in milliseconds (0: the lock's own ttl),
-- ARGV[3] mode or ''; 'bound' is the watchdog's renewal, refused once the
-- lock has become a lease, ARGV[4] the attempt the extension is bound to
-- ('' for any hold of the token): only a hold that attempt was the last to
-- take or refresh (the meta's attempt) is extended, ARGV[5] how long,
-- in ms, a mark written here lasts ('0': none written), ARGV[6] how much
-- longer than the key the meta is kept (ms: acquire.lua)
-- Returns {ttl applied, fence, attempt, mode, name} (the hold as the meta
-- records it: fence 0 and '' where it is not known), so that the
-- extender can heal the lock onto nodes where the key is free (heal.lua);
-- {0, at} if the key is free on this node, with no meta beside it (a meta
-- outlives its key by a grace: a hold was released here, or ended with its
-- lease, and a heal must not bring it back): at is the node's clock in ms,
-- or one more than the key's release mark where that is not below it (the
-- clock stepped back), written as the mark, so that a release after this
-- one marks the key above at whatever the node's clock does (release.lua);
-- {0} if the token does not hold it otherwise; {-1} if a renewal of a
-- connection-bound lock finds it a lease.
-- The key and its meta in one read (MGET answers nil for a key of another
-- type: only then does the script look at the key again).
local got = redis.call('MGET', KEYS[1], KEYS[2])
local holder = got[1]
if holder ~= ARGV[1] then
  if not holder and not got[2] and redis.call('EXISTS', KEYS[1]) == 0 then
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
local m = decode(got[2])
if m.token ~= ARGV[1] then -- the meta expired before the key (a script extended the key)
  m = blank()
end
if ARGV[4] ~= '' and m.attempt ~= ARGV[4] then
  return {0}
end
if ARGV[3] == 'bound' and m.mode == 'lease' then
  return {-1}
end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  -- the lock's own ttl; without a meta, what the key has left
  ttl = tonumber(m.ttl) or redis.call('PTTL', KEYS[1])
  if ttl <= 0 then
    return {0}
  end
end
-- An extension counts the hold toward the extender's majority: like a
-- refresh, it clears took, so that a rollback of the attempt that took the
-- key (a refused retry whose rollback lands after the RENEW) leaves it.
if ARGV[3] ~= '' then
  m.mode = ARGV[3]
end
local fence, attempt, name = m.fence, m.attempt, m.name
m.token, m.ttl, m.took = ARGV[1], count(ttl), '0'
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], encode(m), 'PX', ttl + tonumber(ARGV[6]))
return {ttl, tonumber(fence) or 0, attempt, m.mode, name}
