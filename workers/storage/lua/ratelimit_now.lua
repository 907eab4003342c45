-- Included by the rate limiter's scripts: the time from Redis itself, one clock for all workers
-- (ratelimit.py says why a worker's own clock overfills the buckets).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
