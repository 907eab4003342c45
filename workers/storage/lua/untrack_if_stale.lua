-- Take a document out of the in-flight index if it has not moved since the caller looked: a
-- reconciler that found it finished must not drop it if it was submitted again meanwhile.
-- KEYS[1]: the in-flight index. ARGV[1]: the member, ARGV[2]: the time it was seen stale before.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
