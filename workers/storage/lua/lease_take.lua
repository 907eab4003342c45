-- KEYS: lease. ARGV: holder, ttl ms. 1 if taken (it was free or had lapsed).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
