-- Raise the node's fence floor, below which no fencing counter on the node
-- counts, and its largest counter, to at least the floor; and record the run
-- id of the process whose counters were raised (a node that restarted
-- without fsync lost its counters: see quorum/restart.go).
-- KEYS[1] fence floor, KEYS[2] largest counter, KEYS[3] vetted run id
-- ARGV[1] floor, ARGV[2] run id
-- Returns 1.
local floor = tonumber(ARGV[1])
if floor > (tonumber(redis.call('GET', KEYS[1])) or 0) then
  redis.call('SET', KEYS[1], ARGV[1])
end
if floor > (tonumber(redis.call('GET', KEYS[2])) or 0) then
  redis.call('SET', KEYS[2], ARGV[1])
end
redis.call('SET', KEYS[3], ARGV[2])
return 1
