-- KEYS: lease, the delivery's counter. ARGV: holder, lease ttl ms, counter ttl s.
-- The lease if it is free (or lapsed), and then this delivery counted: the count (0: not taken).
-- One round trip where a delivery took two (a worker's main process waits on each, in turn).
-- Run again by the same holder (its pipeline re-sent after a NOSCRIPT), it answers the same.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) == ARGV[1] then return tonumber(redis.call('GET', KEYS[2]) or '1') end
  return 0
end
if redis.call('SET', KEYS[2], 1, 'NX', 'EX', ARGV[3]) then return 1 end  -- a first delivery: counted, with its TTL
return redis.call('INCR', KEYS[2])
