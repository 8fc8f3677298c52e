-- Prepended to every script that reads or raises the node's fencing counter
-- or a lock's meta (scripts.go). The counter is the layout key itself, a
-- string (keys.go), one counter for every key of the node; the key's type
-- names the layout: a string in layout 3, a hash in layout 2.
local LAYOUT = '3'
-- settle is called where the layout key holds no counter of layout 3: a node
-- that never held one (new, or restarted without its data), a node in
-- layout 1, where each key had its own counter, none above the node's
-- fence-max, and fence-floor was the floor of them all, or a node in layout
-- 2, whose counter is field fence of the layout hash. It writes layout 3's
-- names on fence-floor and fence-max, hashes that layout 1's scripts read
-- with GET first thing (WRONGTYPE: an instance of layout 1 grants nothing
-- here); layout 2's scripts meet the layout key as a string and get
-- WRONGTYPE from their HGET or HINCRBY of it. It returns the counter to
-- start from: at least every counter of layouts 1 and 2. A layout key of
-- any other type is a later layout's: HGET fails, and the script stops
-- before it writes anything.
-- layout, floor, top: the layout key, fence-floor, fence-max.
local function settle(layout, floor, top)
  local old = 0
  local kind = redis.call('TYPE', layout)['ok']
  if kind ~= 'none' and kind ~= 'string' then
    old = tonumber(redis.call('HGET', layout, 'fence')) or 0 -- layout 2's counter
  end
  for _, k in ipairs({floor, top}) do
    local v = redis.pcall('GET', k) -- a table (WRONGTYPE) once replaced
    if type(v) == 'string' then
      old = math.max(old, tonumber(v) or 0)
    end
  end
  redis.call('DEL', floor, top)
  redis.call('HSET', floor, 'layout', LAYOUT, 'see', layout)
  redis.call('HSET', top, 'layout', LAYOUT, 'see', layout)
  return old
end
-- (The counter is written as an integer, never as Lua's 1e+15, so that
-- INCR can raise it.)
local function count(n)
  return string.format('%.0f', n)
end
-- nodecounter is the node's fencing counter, settling the layout first if the
-- node has none.
local function nodecounter(layout, floor, top)
  local c = redis.pcall('GET', layout) -- a table (WRONGTYPE) on layout 2's hash
  if type(c) == 'string' then
    return tonumber(c)
  end
  c = settle(layout, floor, top)
  redis.call('SET', layout, count(c))
  return c
end
-- raise sets the node's fencing counter to at least n.
local function raise(layout, floor, top, n)
  if n > nodecounter(layout, floor, top) then
    redis.call('SET', layout, count(n))
  end
end
-- A lock's meta is one string (keys.go): token, fence, mode, name, ttl,
-- attempt, took and lined, each as its length in bytes, ':' and its bytes,
-- so that any bytes survive. encode writes it; decode reads it back, with
-- every field '' where the meta is missing (nil from MGET: no key, or a key
-- of another type, as layout 2's meta hash) or unreadable.
-- lined is '0' only where the key's waiting line did not exist when the
-- holder's acquire wrote the meta and nobody has taken a place in it since
-- (acquire.lua flags the holder's meta, in the same step, whenever it
-- places a waiter while the key is held); any other value, '' among them,
-- is "a line may exist", and a release looks (release.lua).
local FIELDS = {'token', 'fence', 'mode', 'name', 'ttl', 'attempt', 'took', 'lined'}
local function encode(m)
  local out = {}
  for i, f in ipairs(FIELDS) do
    local v = m[f] or ''
    out[i] = string.len(v) .. ':' .. v
  end
  return table.concat(out)
end
local function blank()
  local m = {}
  for _, f in ipairs(FIELDS) do
    m[f] = ''
  end
  return m
end
-- length reads the length of the field of s at at (up to the first ':'),
-- as tonumber does, and where the field's bytes start; nil where the length
-- is not a number. A length of up to three digits it reads from the bytes
-- themselves, with one call and no string made: most of a release's Lua
-- work was reading the meta.
local function length(s, at)
  local a, b, c, d = string.byte(s, at, at + 3)
  if a and a >= 48 and a <= 57 then
    if b == 58 then
      return a - 48, at + 2
    elseif b and b >= 48 and b <= 57 then
      if c == 58 then
        return (a - 48) * 10 + b - 48, at + 3
      elseif c and c >= 48 and c <= 57 and d == 58 then
        return (a - 48) * 100 + (b - 48) * 10 + c - 48, at + 4
      end
    end
  end
  local n, from = string.match(s, '^([^:]*):()', at)
  return n and tonumber(n), from
end
local function decode(s)
  if type(s) ~= 'string' then
    return blank()
  end
  local m, at, size = {}, 1, #s
  for _, f in ipairs(FIELDS) do
    local n, from = length(s, at)
    if not n or from + n > size + 2 then
      return blank()
    end
    m[f] = string.sub(s, from, from + n - 1)
    at = from + n
  end
  return m
end
-- Everything below is the script itself.
