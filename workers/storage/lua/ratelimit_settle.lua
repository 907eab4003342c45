-- KEYS: buckets. ARGV: per bucket (capacity, refill per second, the difference to take back or add).
--! include ratelimit_now
for i = 1, #KEYS do
  local cap, rate, delta = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local state = redis.call('HMGET', KEYS[i], 'level', 'ts')
  local level, ts = tonumber(state[1]) or cap, tonumber(state[2]) or now
  level = math.min(cap, level + math.max(0, now - ts) * rate) - delta
  redis.call('HSET', KEYS[i], 'level', level, 'ts', now)
  redis.call('EXPIRE', KEYS[i], 3600)
end
return 1
