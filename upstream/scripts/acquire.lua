-- Take a lock if it is free and no older waiter is in line for it, or reset
-- its TTL if the token already holds it. Taking it raises the node's fencing
-- counter (one for every key: layout.lua) by one and records the new value
-- as the lock's fence, in the same atomic step. A waiter that is refused takes (or keeps) its place in line.
-- KEYS[1] the lock key itself: the string token with the lease's TTL, as
-- SET NX PX leaves it (any other value, of any type, is another holder's),
-- KEYS[2] the layout key, the node's fencing counter (layout.lua),
-- KEYS[3] waiting line (sorted set: waiter -> arrival, µs),
-- KEYS[4] line deadlines (sorted set: waiter -> µs of the node's clock
-- (TIME) after which it is gone: every instance adds and purges places
-- against the same clock, so one whose clock is ahead disables no line),
-- KEYS[5] this attempt's undo mark (set by a rollback or release that may
-- have come first: an acquire that finds it takes nothing)
-- ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] the token and
-- ARGV[4] mode, name, ttl and attempt as fields of the meta (meta()),
-- ARGV[5] waiter id ('' for a client that does not wait), ARGV[6] its
-- arrival (µs of the waiting instance's clock: it orders the line),
-- ARGV[7] how long its place is kept (µs), ARGV[8] the next waiter of this
-- instance ('' for none) and ARGV[9] its arrival: it takes its place in
-- line when this acquire succeeds, with no round trip of its own;
-- ARGV[10] names this attempt; the lock records it, so that a rollback or
-- release can tell whether this acquire has landed. ARGV[11] is '1' for a
-- fresh acquire (SET NX: refused even when the token already holds the key,
-- since legacy values need not be unique), '' for an acquire that may be
-- retried by the holder. ARGV[12] is the meta's TTL (ms): the lease plus
-- the grace the meta outlives its key by (quorum.Op.MetaFor).
-- KEYS[6] and KEYS[7] fence-floor and fence-max, the node-wide keys of
-- layout 1, read once when the node has no counter yet (layout.lua), KEYS[8]
-- the lock's meta (one string, meta.lua's encode: token, fence, mode,
-- name, ttl; attempt, the last attempt to take or refresh the key, and
-- took, '1' when that attempt took it and '0' when it only refreshed it; it
-- describes the holder only while its token is the lock key's value, and
-- has the key's TTL plus a grace: a release deletes the key alone, and an
-- extension that finds the key free beside a meta heals nothing there:
-- extend.lua), KEYS[9] the key's release mark (release.lua,
-- extend.lua): where there is one, taking the key raises it (taken()).
-- Returns {state, counter, n}: state 1 acquired (n is the fence), 2 already
-- mine (n is the fence of that grant, or the node's counter where it is not
-- known: never below it), 0 refused (n is how long, in ms, the
-- holder's lease or the first waiter's place still runs).
-- The meta keeps the ttl so that a renewal without one reuses it.
-- now is the node's clock in microseconds, read once, when first needed.
local clock
local function now()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock
end
-- meta writes the lock's meta for ARGV[1] (meta.lua's encode), from
-- ARGV[3], the token as a field of it, and ARGV[4], mode, name, ttl and
-- attempt as its fields: the instance encodes them (redis.go), and the
-- script adds only what it learns. rest is took and lined, encoded: took
-- '1' and lined '0' ('0' where the script found no line: meta.lua) are
-- TOOK_UNLINED.
local TOOK_UNLINED, TOOK_LINED = '1:11:0', '1:11:1'
local function meta(fence, rest)
  local f = count(fence)
  redis.call('SET', KEYS[8], ARGV[3] .. #f .. ':' .. f .. ARGV[4] .. rest, 'PX', ARGV[12])
end
-- taken raises the key's release mark by one where there is one (mark,
-- read below): a renewal that found the key free here wrote it, and a heal
-- decided from that renewal (heal.lua), held up on its way, must take
-- nothing once the hold taken now is gone (released, or ended with its
-- lease): else it would plant the renewal's old fence after a later grant's.
local mark
local function taken()
  if mark then
    redis.call('SET', KEYS[9], count(mark + 1), 'KEEPTTL')
  end
end
-- raised is the node's counter raised by one, the new hold's fence. It is
-- counted before the script writes anything of the take, so that a later
-- layout, which gives the layout key another type, stops the script before
-- it writes (settle).
local function raised()
  local fence = redis.pcall('INCR', KEYS[2]) -- a table (WRONGTYPE) on layout 2's hash
  if type(fence) ~= 'number' then
    fence = nodecounter(KEYS[2], KEYS[6], KEYS[7]) + 1
    redis.call('SET', KEYS[2], count(fence))
  elseif fence == 1 then -- no counter on the node until now
    fence = settle(KEYS[2], KEYS[6], KEYS[7]) + 1
    redis.call('SET', KEYS[2], count(fence))
  end
  return fence
end
-- The common case, in five commands: no undo mark, nobody in line, no
-- release mark, no waiter of this instance to place, and the key free.
-- Where the key is not free, the count is taken back in the same atomic
-- step, and nobody saw it.
local quiet = ARGV[8] == '' and redis.call('EXISTS', KEYS[5], KEYS[3], KEYS[9]) == 0
-- counter is the node's counter, read where a reply needs it (counted).
local counter
local function counted()
  if not counter then
    counter = nodecounter(KEYS[2], KEYS[6], KEYS[7])
  end
  return counter
end
if quiet then
  local fence = raised()
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    meta(fence, TOOK_UNLINED)
    return {1, fence, fence}
  end
  counter = redis.call('DECR', KEYS[2])
else
  -- The undo mark and the release mark in one read (MGET: nil for a key
  -- that is not there; the mark is a number, else no mark).
  local marks = redis.call('MGET', KEYS[5], KEYS[9])
  if marks[1] then -- undone before it got here
    return {0, counted(), 0}
  end
  mark = tonumber(marks[2])
end
local holder = redis.pcall('GET', KEYS[1])
local waiter = ARGV[5]
if holder == ARGV[1] and ARGV[11] ~= '1' then
  counted() -- before anything is written (raised)
  local m = decode(redis.call('MGET', KEYS[8])[1])
  -- Where the hold's fence is unknown (its meta expired before the key, or
  -- is layout 2's hash), the node's counter stands for it: never below the
  -- grant's fence.
  local fence = m.token == holder and tonumber(m.fence) or counter
  -- A refresh records its attempt as the last to land, but not as the one
  -- that took the key: its rollback deletes nothing (see release.lua).
  local lined = m.token == holder and m.lined or ''
  meta(fence, '1:0' .. #lined .. ':' .. lined)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, counter, fence}
end
local wait
if holder then
  wait = redis.call('PTTL', KEYS[1])
else
  -- The line's first place, where anybody waits. Places whose waiters
  -- are gone (their deadline passed) are purged first, unless the first
  -- is the waiter asking, which takes the key whoever is behind it.
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  local lined = first ~= nil
  if first and first ~= waiter then
    counted() -- before anything is written (raised)
    local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now())
    if #gone > 0 then
      redis.call('ZREM', KEYS[3], unpack(gone))
      redis.call('ZREM', KEYS[4], unpack(gone))
      first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    end
  end
  if not first or first == waiter then
    local fence = raised()
    if first then
      redis.call('ZREM', KEYS[3], waiter)
      redis.call('ZREM', KEYS[4], waiter)
    end
    if ARGV[8] ~= '' then
      redis.call('ZADD', KEYS[3], 'NX', ARGV[9], ARGV[8])
      redis.call('ZADD', KEYS[4], now() + tonumber(ARGV[7]), ARGV[8])
      local keep = math.ceil(tonumber(ARGV[7]) / 1000)
      redis.call('PEXPIRE', KEYS[3], keep)
      redis.call('PEXPIRE', KEYS[4], keep)
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    taken()
    meta(fence, (lined or ARGV[8] ~= '') and TOOK_LINED or TOOK_UNLINED)
    return {1, fence, fence}
  end
  wait = math.floor((tonumber(redis.call('ZSCORE', KEYS[4], first)) - now()) / 1000)
end
counted() -- before anything is written (raised)
if waiter ~= '' then
  local keep = math.ceil(tonumber(ARGV[7]) / 1000)
  redis.call('ZADD', KEYS[3], 'NX', ARGV[6], waiter)
  redis.call('ZADD', KEYS[4], now() + tonumber(ARGV[7]), waiter)
  redis.call('PEXPIRE', KEYS[3], keep)
  redis.call('PEXPIRE', KEYS[4], keep)
  -- The holder's release must look at the line now (meta.lua's lined).
  if type(holder) == 'string' then
    local m = decode(redis.call('MGET', KEYS[8])[1])
    if m.token == holder and m.lined == '0' then
      m.lined = '1'
      redis.call('SET', KEYS[8], encode(m), 'KEEPTTL')
    end
  end
end
return {0, counter, wait}
