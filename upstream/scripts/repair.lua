-- Repair a node that drifted apart (quorum/repair.go): give each key the
-- state the majority of nodes holds, only while the script's turn holds
-- every key's turn, in one atomic step.
-- KEYS: the n keys, then their n turn keys, then their n release marks
-- (release.lua, extend.lua). ARGV[1] the turn's token, then for each key
-- its remaining time in ms (-2: the majority has no key, delete it; -1: no
-- expiry) and its DUMP payload.
-- A RESTORE can take a lock key on the node (the majority's token, where
-- the node had none), as an acquire does: it raises the key's release mark
-- by one where there is one (acquire.lua's taken), so that a renewal's
-- heal decided before it (heal.lua) takes nothing once that hold is gone.
-- The guard of the script repaired after (GuardStated) raised the mark
-- too, but when the script ran here: a renewal that found the key free
-- between the script and this repair is voided by this raise alone.
local n = #KEYS / 3
for i = 1, n do
  if redis.call('GET', KEYS[n + i]) ~= ARGV[1] then
    return redis.error_reply('LOCKPROXY_TURN ' .. ARGV[1] .. ' the turn on the keys is not the script\'s on this node')
  end
end
for i = 1, n do
  local pttl = tonumber(ARGV[2 * i])
  if pttl == -2 then
    redis.call('DEL', KEYS[i])
  else
    local ttl = 0 -- no expiry
    if pttl >= 0 then
      ttl = math.max(pttl, 1)
    end
    redis.call('RESTORE', KEYS[i], ttl, ARGV[2 * i + 1], 'REPLACE')
    local mark = tonumber(redis.pcall('GET', KEYS[2 * n + i])) -- nil unless a number
    if mark then
      redis.call('SET', KEYS[2 * n + i], string.format('%.0f', mark + 1), 'KEEPTTL')
    end
  end
end
return n
