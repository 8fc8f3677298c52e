-- Prepended to every script that reads or raises the node's fencing counter
-- (scripts.go). The counter is field fence of the layout hash (keys.go),
-- one counter for every key of the node; the hash's field version names
-- the layout.
local LAYOUT = '2'
-- settle is called where the layout hash has no counter: a node that never
-- held one (new, or restarted without its data), or a node in layout 1,
-- where each key had its own counter, none above the node's fence-max, and
-- fence-floor was the floor of them all. It writes layout 2 on the node,
-- replacing fence-floor and fence-max by hashes that name it: a script of
-- layout 1 reads them with GET first thing, so an instance of an earlier
-- version gets WRONGTYPE from this node and grants nothing here. It
-- returns the counter to start from: at least every counter of layout 1.
-- layout, floor, top: the keys of the layout hash, fence-floor, fence-max.
local function settle(layout, floor, top)
  local old = 0
  for _, k in ipairs({floor, top}) do
    local v = redis.pcall('GET', k) -- a table (WRONGTYPE) once replaced
    if type(v) == 'string' then
      old = math.max(old, tonumber(v) or 0)
    end
  end
  redis.call('DEL', floor, top)
  redis.call('HSET', floor, 'layout', LAYOUT, 'see', layout)
  redis.call('HSET', top, 'layout', LAYOUT, 'see', layout)
  redis.call('HSET', layout, 'version', LAYOUT)
  return old
end
-- nodecounter is the node's fencing counter, settling the layout first if the
-- node has none.
local function nodecounter(layout, floor, top)
  local c = tonumber(redis.call('HGET', layout, 'fence'))
  if c then
    return c
  end
  c = settle(layout, floor, top)
  redis.call('HSET', layout, 'fence', string.format('%.0f', c))
  return c
end
-- (The counter is written as an integer, never as Lua's 1e+15, so that
-- HINCRBY can raise it.)
-- raise sets the node's fencing counter to at least n.
local function raise(layout, floor, top, n)
  if n > nodecounter(layout, floor, top) then
    redis.call('HSET', layout, 'fence', string.format('%.0f', n))
  end
end
-- Everything below is the script itself.
