-- One piece of work for a queue (storage/fairqueue.py): straight into the queue's sending set when
-- no collection has work parked for that queue and the queue has room — what a queue that keeps up
-- sees every time, in one script — else parked in its collection's line, for admission's turns.
-- KEYS[1]: the collection's line, KEYS[2]: the queue's ring, KEYS[3]: the waiting hash, KEYS[4]: the
-- sending zset, KEYS[5]: the sending hash, KEYS[6]: the queued hash.
-- ARGV[1]: the entry (JSON), ARGV[2]: the collection, ARGV[3]: "1" to go to the front of its line,
-- ARGV[4]: the entry's document (collection \x1f doc id), ARGV[5]: its id, ARGV[6]: now,
-- ARGV[7]: how many messages the queue may hold ahead of its workers, ARGV[8]: the queue.
-- Returns the entry if it is to be sent now, else false (parked).
redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
if redis.call('LLEN', KEYS[2]) == 0
   and tonumber(redis.call('HGET', KEYS[6], ARGV[8]) or '0') < tonumber(ARGV[7]) then
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[5])
  redis.call('HSET', KEYS[5], ARGV[5], ARGV[1])
  redis.call('HINCRBY', KEYS[6], ARGV[8], 1)
  return ARGV[1]
end
local n
if ARGV[3] == '1' then n = redis.call('LPUSH', KEYS[1], ARGV[1]) else n = redis.call('RPUSH', KEYS[1], ARGV[1]) end
if n == 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end
return false
