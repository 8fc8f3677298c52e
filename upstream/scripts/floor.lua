-- Raise the node's fencing counter (layout.lua) to at least the floor, and
-- record the run id of the process whose counter was raised (a node that
-- restarted without fsync lost its counter: see quorum/restart.go), and
-- beside it the counter after the raise with that run id: every hold the
-- process took before has a fence up to it, for every instance to see
-- (a hold from before a floor is set aside: quorum's staleHold).
-- KEYS[1] fence-floor and KEYS[2] fence-max of layout 1 (read where the node
-- has no counter yet), KEYS[3] vetted run id, KEYS[4] the layout key,
-- KEYS[5] the vetted floor ("<counter>:<run id>")
-- ARGV[1] floor, ARGV[2] run id
-- Returns {1, the counter after the raise}.
raise(KEYS[4], KEYS[1], KEYS[2], tonumber(ARGV[1]))
local c = nodecounter(KEYS[4], KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[2])
redis.call('SET', KEYS[5], count(c) .. ':' .. ARGV[2])
return {1, c}
