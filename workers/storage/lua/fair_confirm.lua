-- Admitted entries a worker has received: no longer ours to send (see storage/fairqueue.py).
-- KEYS[1]: the sending zset, KEYS[2]: the sending hash, KEYS[3]: the waiting hash (document ->
-- entries parked or being sent), KEYS[4]: the queued hash (queue -> admitted, not yet received).
-- ARGV: for each entry, its id, its queue and its document (collection \x1f doc id): the receiver
-- knows them, so the entry need not be read back. Each counts once: a second confirmation of an
-- id finds it gone.
for i = 1, #ARGV, 3 do
  local id, queue, doc = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('ZREM', KEYS[1], id)
  if redis.call('HDEL', KEYS[2], id) == 1 then
    if redis.call('HINCRBY', KEYS[3], doc, -1) <= 0 then redis.call('HDEL', KEYS[3], doc) end
    if redis.call('HINCRBY', KEYS[4], queue, -1) < 0 then redis.call('HSET', KEYS[4], queue, 0) end
  end
end
return #ARGV / 3
