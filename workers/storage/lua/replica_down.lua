-- A replica that refused a connection or timed out (storage/replicas.py): left alone from now
-- for ARGV[2] seconds, doubled for each failure in a row up to ARGV[3]; a replica already down
-- stays as it is (many calls fail on it at once). A probe that succeeds removes the entry.
-- KEYS: the down hash. ARGV: label, seconds, most seconds. Returns the seconds, 0 if already down.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local entry = redis.call('HGET', KEYS[1], ARGV[1])
local failures = 0
if entry then
  local untill, count = string.match(entry, '^([%d.]+)|(%d+)$')
  if tonumber(untill) > now then return 0 end
  failures = tonumber(count)
end
local wait = math.min(tonumber(ARGV[2]) * 2 ^ failures, tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.3f|%d', now + wait, failures + 1))
return tostring(wait)
