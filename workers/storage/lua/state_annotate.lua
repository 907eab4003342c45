-- KEYS: doc hash. ARGV: field/value pairs. Written only for a document that has a state.
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], unpack(ARGV)) end
