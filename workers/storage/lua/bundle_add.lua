-- A one-chunk document joins its collection's bundle pool (see storage/bundle_pool.py).
-- KEYS[1]: the pool (a list), KEYS[2]: its weight in bytes, KEYS[3]: the waiting set, KEYS[4]: the
-- collection's counts by state.
-- ARGV[1]: the entry (JSON [doc id, version, bytes]), ARGV[2]: its document (collection \x1f id),
-- ARGV[3]: its bytes. Returns {documents, bytes} the pool holds now, and the collection's
-- documents in flight (the pool's among them).
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local weight = redis.call('INCRBY', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[2])
local flying = 0
for _, c in ipairs(redis.call('HMGET', KEYS[4], 'queued', 'chunked', 'situated')) do flying = flying + (tonumber(c) or 0) end
return {n, weight, flying}
