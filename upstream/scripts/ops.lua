-- The calls (opsScript's comment in scripts.go), after their scripts as
-- ops[op]: ARGV[1] has three bytes per call, its op, its count of keys
-- and of arguments.
local head, out = ARGV[1], {}
local k, a = 0, 1
for i = 1, #head / 3 do
  local op, nk, na = string.byte(head, 3 * i - 2, 3 * i)
  local ok, r = pcall(ops[op], {unpack(KEYS, k + 1, k + nk)}, {unpack(ARGV, a + 1, a + na)})
  k, a = k + nk, a + na
  if ok then
    if r == nil then r = false end -- a null reply, nested
  elseif type(r) == 'string' and string.find(r, '^%u+ ') then
    r = {err = r} -- a command's error (WRONGTYPE ...), as Redis replies it
  elseif type(r) ~= 'table' or type(r.err) ~= 'string' then
    r = {err = 'ERR ' .. tostring(r)} -- Lua's, as Redis replies it
  end
  out[i] = r
end
return out
