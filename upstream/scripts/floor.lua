-- Raise the node's fencing counter (layout.lua) to at least the floor, and
-- record the run id of the process whose counter was raised (a node that
-- restarted without fsync lost its counter: see quorum/restart.go), and
-- beside it the counter after the raise with that run id: every hold the
-- process took before has a fence up to it, for every instance to see
-- (a hold from before a floor is set aside: quorum's staleHold). A record
-- for this very process is kept: every hold taken before its first raise
-- has a fence up to it, and a later raise (a second instance that read the
-- node before the first raise, or after an instance cleared its vetted run
-- id) must not take the holds granted since for holds from before the
-- floor. No floor (quorum's RestartedMark) leaves the record as it is.
-- KEYS[1] fence-floor and KEYS[2] fence-max of layout 1 (read where the node
-- has no counter yet), KEYS[3] vetted run id, KEYS[4] the layout key,
-- KEYS[5] the vetted floor ("<counter>:<run id>")
-- ARGV[1] floor, ARGV[2] run id
-- Returns {1, the counter recorded for the process: after its first raise}.
local floor = tonumber(ARGV[1])
raise(KEYS[4], KEYS[1], KEYS[2], floor)
local c = nodecounter(KEYS[4], KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[2])
if floor > 0 then
  local rec = redis.pcall('GET', KEYS[5])
  local at, run
  if type(rec) == 'string' then
    at, run = string.match(rec, '^(%d+):(.*)$')
  end
  if at and run == ARGV[2] then
    return {1, tonumber(at)}
  end
  redis.call('SET', KEYS[5], count(c) .. ':' .. ARGV[2])
end
return {1, c}
