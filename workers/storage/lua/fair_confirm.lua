-- Admitted entries a worker has received: no longer ours to send (see storage/fairqueue.py).
-- KEYS[1]: the sending zset, KEYS[2]: the sending hash, KEYS[3]: the waiting hash, KEYS[4]: its total,
-- KEYS[5]: the queued hash (queue -> admitted and not yet received).
-- ARGV: the entries' ids. Each counts once: a second confirmation of an id finds it gone.
for _, id in ipairs(ARGV) do
  local raw = redis.call('HGET', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  if raw then
    local e = cjson.decode(raw)
    local doc = e.collection .. '\031' .. tostring(e.args[2])
    if redis.call('HINCRBY', KEYS[3], doc, -1) <= 0 then redis.call('HDEL', KEYS[3], doc) end
    redis.call('DECR', KEYS[4])
    if redis.call('HINCRBY', KEYS[5], e.queue, -1) < 0 then redis.call('HSET', KEYS[5], e.queue, 0) end
  end
end
return #ARGV
