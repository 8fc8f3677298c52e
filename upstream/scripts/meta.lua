-- Prepended to every script that reads or writes a lock's meta (scripts.go),
-- after layout.lua where the script also needs the node's counter. A
-- script that only reads the meta (release.lua, inspect.lua) is spared
-- layout.lua's functions: each costs the node work on every call.
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
-- work was reading the meta. Only at a whole position inside s: a meta no
-- script wrote (a negative or fractional length before) can leave at below
-- 1 or between bytes, where string.byte counts from the end or truncates, and
-- at + 2 is not where the field starts; string.match finds it as
-- string.find did.
local function length(s, at)
  local a, b, c, d
  if at >= 1 and at % 1 == 0 then
    a, b, c, d = string.byte(s, at, at + 3)
  end
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
