#!lua flags=allow-oom
-- Move members already in a sorted set to a new score (ZADD XX): a heartbeat's refresh of
-- Kombu's unacked_index and of the in-flight documents. Allowed when Redis is at maxmemory
-- (allow-oom): updating a score adds no memory, and a heartbeat that cannot say "alive" while
-- Redis is full makes live work look dead (its messages given to another worker meanwhile).
-- KEYS[1]: the sorted set. ARGV[1]: the score, then the members.
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[1], ARGV[i])
end
return n
