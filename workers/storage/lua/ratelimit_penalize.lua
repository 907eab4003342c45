-- KEYS: the request bucket. ARGV: capacity, refill per second, seconds. Sets the level so
-- that the next request fits only after ``seconds``, and never lower: 429s answered to many
-- workers at once must not add up into a long stall.
--! include ratelimit_now
local cap, rate, seconds = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'level', 'ts')
local level, ts = tonumber(state[1]) or cap, tonumber(state[2]) or now
level = math.min(cap, level + math.max(0, now - ts) * rate)
level = math.min(level, 1 - rate * seconds)
redis.call('HSET', KEYS[1], 'level', level, 'ts', now)
redis.call('EXPIRE', KEYS[1], 3600)
return 1
