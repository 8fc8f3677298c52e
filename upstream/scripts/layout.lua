-- Prepended to every script that reads or raises the node's fencing counter
-- (scripts.go); meta.lua has the lock's meta. The counter is the layout key itself, a
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
-- Everything below is the script itself, or meta.lua.
