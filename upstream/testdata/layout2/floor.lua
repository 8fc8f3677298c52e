-- Raise the node's fencing counter (layout.lua) to at least the floor, and
-- record the run id of the process whose counter was raised (a node that
-- restarted without fsync lost its counter: see quorum/restart.go).
-- KEYS[1] fence-floor and KEYS[2] fence-max of layout 1 (read where the node
-- has no counter yet), KEYS[3] vetted run id, KEYS[4] the layout hash
-- ARGV[1] floor, ARGV[2] run id
-- Returns 1.
raise(KEYS[4], KEYS[1], KEYS[2], tonumber(ARGV[1]))
redis.call('SET', KEYS[3], ARGV[2])
return 1
