-- A file's original bytes kept past extraction, within a budget (storage/bodies.py).
-- KEYS[1]: the in-flight original, KEYS[2]: the kept original, KEYS[3]: its version, KEYS[4]: the
-- bytes every kept original takes. ARGV[1]: the budget in bytes, ARGV[2]: the version.
-- Returns 1 kept, 0 over the budget (the in-flight original is dropped), -1 no original in flight.
local size = redis.call('STRLEN', KEYS[1])
if size == 0 then return -1 end
local total = tonumber(redis.call('GET', KEYS[4]) or '0') - redis.call('STRLEN', KEYS[2]) + size
if total > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('PERSIST', KEYS[2])
redis.call('SET', KEYS[3], ARGV[2])
redis.call('SET', KEYS[4], total)
return 1
