-- A one-chunk document joins its collection's bundle pool (see storage/bundle_pool.py).
-- KEYS[1]: the pool (a list), KEYS[2]: its weight in bytes, KEYS[3]: the waiting set.
-- ARGV[1]: the entry (JSON [doc id, version, bytes]), ARGV[2]: its document (collection \x1f id),
-- ARGV[3]: its bytes. Returns {documents, bytes} the pool holds now.
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local weight = redis.call('INCRBY', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[2])
return {n, weight}
