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
-- floor. So is a process vetted already with no record (by a build before
-- the record): the counter now is not its floor, and no record is written.
-- No floor (quorum's RestartedMark) leaves the record as it is.
-- KEYS[1] fence-floor and KEYS[2] fence-max of layout 1 (read where the node
-- has no counter yet), KEYS[3] vetted run id, KEYS[4] the layout key,
-- KEYS[5] the vetted floor ("<counter>:<run id>")
-- ARGV[1] floor, ARGV[2] run id
-- Returns {1, the counter recorded for the process: after its first raise;
-- 0 where none is (no floor, or a process vetted with no record)}.
local floor = tonumber(ARGV[1])
raise(KEYS[4], KEYS[1], KEYS[2], floor)
local c = nodecounter(KEYS[4], KEYS[1], KEYS[2])
local was = redis.pcall('GET', KEYS[3])
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
  if was == ARGV[2] then
    return {1, 0} -- vetted by a build that records no floor: none is known
  end
  redis.call('SET', KEYS[5], count(c) .. ':' .. ARGV[2])
  return {1, c}
end
return {1, 0}
