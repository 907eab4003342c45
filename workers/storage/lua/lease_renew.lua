#!lua flags=allow-oom
-- KEYS: leases. ARGV: their holders, then ttl ms. Renews those still held by the given holder;
-- allowed when Redis is full (a lease that lapses then lets a second delivery run the same work).
local ttl = ARGV[#ARGV]
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
