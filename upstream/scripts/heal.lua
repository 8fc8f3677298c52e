-- Take a lock again, for the token that holds it on a majority of nodes, on
-- a node where its key is free (the node restarted empty, or missed the
-- grant): a renewal heals the nodes that lost the lock (quorum.Extend).
-- KEYS[1] the lock key, KEYS[2] its meta (meta.lua's encode), KEYS[3] the
-- key's release mark (release.lua: the node's clock, in ms, when a release
-- of the key found it free or another's), KEYS[4] the layout key (the
-- node's counter, layout.lua), KEYS[5] and KEYS[6] fence-floor and
-- fence-max of layout 1 (read where the node has no counter yet)
-- ARGV[1] token, ARGV[2] fence, ARGV[3] mode, ARGV[4] name, ARGV[5] the
-- lock's ttl (ms: what a renewal without one reuses), ARGV[6] the attempt
-- the hold records (so that releases and extensions bound to it still
-- match), ARGV[7] the node's clock (ms) when the renewal found the key
-- free here, ARGV[8] ARGV[7] plus the validity the holder was told has
-- left when the heal is sent: no later than the node's clock when that
-- validity ends, ARGV[9] how much longer than the key the meta is kept
-- (ms: acquire.lua)
-- Taking the key raises the mark by one, as an acquire does (acquire.lua):
-- no other heal decided before this one takes the key once it is gone.
-- Returns the TTL given to the key in ms, or 0 if it took nothing: the key
-- is not free (another holder, of any type, or the token itself), a release
-- of the key (or a later renewal) ran here since the renewal found it free
-- (the mark is above ARGV[7]), or the validity is over.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- The extension that found the key free wrote ARGV[7] as the mark
-- (extend.lua); a release since, or a later extension, wrote one above it.
local mark = tonumber(redis.pcall('GET', KEYS[3])) -- nil unless a number
if mark and mark > tonumber(ARGV[7]) then
  return 0
end
local t = redis.call('TIME')
local left = tonumber(ARGV[8]) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
-- Never more than the validity left when the heal was sent: a clock that
-- stepped back since does not lengthen it.
left = math.min(left, tonumber(ARGV[8]) - tonumber(ARGV[7]))
if left <= 0 then
  return 0
end
-- The counter: no later grant on this node counts at or below the fence.
raise(KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[2]))
redis.call('SET', KEYS[1], ARGV[1], 'PX', left)
if mark then
  redis.call('SET', KEYS[3], count(mark + 1), 'KEEPTTL')
end
-- took '0': no rollback of any attempt deletes the healed hold.
redis.call('SET', KEYS[2], encode({token = ARGV[1], fence = ARGV[2], mode = ARGV[3], name = ARGV[4],
  ttl = ARGV[5], attempt = ARGV[6], took = '0'}), 'PX', left + tonumber(ARGV[9]))
return left
