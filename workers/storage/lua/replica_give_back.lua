-- A call's place on a replica given back (storage/replicas.py): out of its load, its slots and
-- its waiting line; the calls first in that line, as many as there are free slots, are woken (a
-- token on each one's own list, which it waits on with BLPOP) instead of finding a slot free at
-- their next look.
-- KEYS: the replica's load, slots, waiting line. ARGV: the call id, the wake lists' prefix, the
--   replica's slots.
redis.call('ZREM', KEYS[1], ARGV[1])
local had_slot = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if had_slot == 1 then
  local t = redis.call('TIME')
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(t[1]) + tonumber(t[2]) / 1e6)
  local open = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[2])
  if open > 0 then
    for _, waiter in ipairs(redis.call('ZRANGE', KEYS[3], 0, open - 1)) do
      local wake = ARGV[2] .. waiter
      redis.call('RPUSH', wake, '1')
      redis.call('EXPIRE', wake, 30)
    end
  end
end
return had_slot
