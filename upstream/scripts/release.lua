-- Delete a lock the token holds, and announce it to waiters. The node's
-- fencing counter stays. Unless the release is a rollback, the token also gives up
-- any place it held in the key's line (as a waiter, the token names its
-- place): a waiter granted elsewhere may have been refused, and placed in
-- line, on this node.
-- KEYS[1] the lock key (holds the token's string while the token holds it),
-- KEYS[2] waiting line, KEYS[3] line deadlines, KEYS[4] the undo mark of the
-- acquire attempt ARGV[7], KEYS[5] the lock's meta (meta.lua's encode; it
-- describes the holder only while its token is the lock key's value), KEYS[6] the key's
-- release mark, written (the node's clock, in ms, for ARGV[11] ms; '0':
-- not written) by a release that is not a rollback where the token does
-- not hold the key: a heal that found the key free before it takes nothing
-- (heal.lua)
-- ARGV[1] token, ARGV[2] channel of release notifications, ARGV[3] the key as
-- clients name it (without the prefix), ARGV[4] '1' to leave the line,
-- ARGV[5] the attempt a release is bound to ('' for any): only a hold that
-- attempt was the last to take or refresh is deleted; with ARGV[10] '1' (a
-- rollback), only one that attempt took and nobody refreshed or extended
-- since (extend.lua clears took: the extender counted the hold), so that
-- neither a refused retry nor an earlier attempt landing late removes the
-- hold it found; ARGV[6] and
-- ARGV[9] the releasing instance's first and second waiters ('' for none):
-- that instance wakes the first itself, and the second after it (the
-- first's grant puts the second in line), so while nobody else is in line,
-- nobody needs the message; ARGV[7] an acquire attempt that may not have
-- landed on this node yet ('' for none) and ARGV[8] how long, in ms, to
-- remember it: unless the lock shows that attempt landed, the release marks
-- it undone, so that it takes nothing when it lands later (on a connection
-- that was dropped meanwhile, its order against this release is unknown).
-- ARGV[12] is ARGV[1] as the meta's first field (meta.lua's encode).
-- ARGV[13] is how long (ms; '0': none) the release leaves a meta that
-- describes nobody where the hold it deletes has no meta of its own (a
-- client's script or the repair of a drifted node took the key).
-- Returns {1, attempt} if the token held the lock (attempt: the last attempt
-- that took or refreshed the hold deleted, '' if not recorded), else 0.
-- It publishes only when it deleted, and
-- only while someone other than ARGV[6] and ARGV[9] waits in the key's
-- line: a waiter refused through any instance holds a place on the nodes
-- that refused it, and its own instance wakes it directly. The message is
-- '<length of token>:<token><key>', so that the instance that released can
-- tell its own release when it hears of it.
-- The key and its meta in one read: MGET answers nil for a key of another
-- type, which is free or another's to a release alike (and a meta of
-- another type, layout 2's hash, is a meta lost).
local got = redis.call('MGET', KEYS[1], KEYS[5])
local holder = got[1]
-- What the meta says of the hold, where it describes it (known): the last
-- attempt that took or refreshed the lock key, whether that attempt took
-- it, and lined (meta.lua).
local known, attempt, took, flag = false, false, false, ''
local s = got[2]
if holder == ARGV[1] and type(s) == 'string' and string.sub(s, 1, #ARGV[12]) == ARGV[12] then
  -- The token's own meta (ARGV[12] is the token as its first field): read
  -- as decode reads it, but only the fields a release needs.
  local at, size, v = #ARGV[12] + 1, #s, {}
  for i = 2, 8 do -- fence, mode, name, ttl, attempt, took, lined
    local n, from = length(s, at)
    if not n or from + n > size + 2 then
      v = {} -- unreadable: decode's blank, every field ''
      break
    end
    if i >= 6 then
      v[i] = string.sub(s, from, from + n - 1)
    end
    at = from + n
  end
  if v[8] or holder == '' then
    known, attempt, took, flag = true, v[6] or '', v[7] or '', v[8] or ''
  end
elseif holder then
  local m = decode(s)
  if m.token == holder then
    known, attempt, took, flag = true, m.attempt, m.took, m.lined
  end
end
-- The line exists only while somebody waits. The release looks at it
-- unless the token holds the key and its meta says that nobody has taken
-- a place in line since its acquire found none (meta.lua's lined): then
-- nobody waits, and the token itself has no place (it could have one only
-- from an acquire refused while it held the key, which flags the meta).
-- Leaving the line is its own look: ZREM of a line that is not there
-- removes nothing.
local look = not (holder == ARGV[1] and known and flag == '0')
if look and ARGV[4] == '1' and redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[3], ARGV[1])
end
if ARGV[7] ~= '' and attempt ~= ARGV[7] then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[8])
end
if holder ~= ARGV[1] then
  -- Where the key is free or another's, the release leaves a mark: a heal
  -- (heal.lua) decided before it, which found the key free here, takes
  -- nothing when it lands after it.
  if ARGV[11] ~= '0' and ARGV[10] ~= '1' then
    -- Above any mark there (an extension that found the key free wrote
    -- its moment as one: extend.lua), even where the clock stepped back.
    local t = redis.call('TIME')
    local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local mark = tonumber(redis.pcall('GET', KEYS[6])) -- nil unless a number
    if mark and mark >= at then
      at = mark + 1
    end
    redis.call('SET', KEYS[6], string.format('%.0f', at), 'PX', ARGV[11])
  end
  return 0
end
if ARGV[5] ~= '' and (attempt ~= ARGV[5] or ARGV[10] == '1' and took ~= '1') then
  return 0
end
-- The key, and its meta replaced by one that describes nobody (every
-- field ''), for the grace: an extension held up on its way that lands
-- after this release finds a meta beside the free key and heals nothing
-- (extend.lua). Not the hold's own meta left as it is: that lasted the
-- rest of the lease and the grace (a lease of minutes released at once
-- kept it that long on every node), had no TTL where commit.lua started it
-- again on a key with no expiry, and described a later hold of the same
-- token that a client's script wrote (its fence shown by LOCKINFO, its
-- attempt deleted by a late rollback of the released hold's).
if ARGV[13] ~= '0' then
  redis.call('SET', KEYS[5], encode(blank()), 'PX', ARGV[13])
end
redis.call('DEL', KEYS[1])
-- Somebody other than ARGV[6] and ARGV[9] waits where the line's first
-- three places are not all theirs (two waiters fill at most two).
local others = 0
if look then
  for _, w in ipairs(redis.call('ZRANGE', KEYS[2], 0, 2)) do
    if w ~= ARGV[6] and w ~= ARGV[9] then
      others = others + 1
    end
  end
end
if others > 0 then
  redis.call('PUBLISH', ARGV[2], string.len(ARGV[1]) .. ':' .. ARGV[1] .. ARGV[3])
end
return {1, attempt or ''}
