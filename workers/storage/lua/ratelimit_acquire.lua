-- KEYS: the buckets (the rate limiter's three, or one). ARGV: per bucket (capacity, refill per second, need).
-- Returns 0 when taken, else the seconds to wait before the scarcest bucket has enough.
--! include ratelimit_now
local levels, wait = {}, 0
for i = 1, #KEYS do
  local cap, rate, need = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local state = redis.call('HMGET', KEYS[i], 'level', 'ts')
  local level, ts = tonumber(state[1]) or cap, tonumber(state[2]) or now
  level = math.min(cap, level + math.max(0, now - ts) * rate)
  levels[i] = level
  need = math.min(need, cap)
  if level < need then wait = math.max(wait, (need - level) / rate) end
end
for i = 1, #KEYS do
  local need = math.min(tonumber(ARGV[3*i]), tonumber(ARGV[3*i-2]))
  local level = levels[i]
  if wait == 0 then level = level - need end
  redis.call('HSET', KEYS[i], 'level', level, 'ts', now)
  redis.call('EXPIRE', KEYS[i], 3600)
end
return tostring(wait)
