-- Park one piece of work in its collection's line for a queue (see storage/fairqueue.py).
-- KEYS[1]: the collection's line, KEYS[2]: the queue's ring of collections with work parked,
-- KEYS[3]: the waiting hash (document -> entries parked or being sent).
-- ARGV[1]: the entry (JSON), ARGV[2]: the collection, ARGV[3]: "1" to go to the front of the line,
-- ARGV[4]: the entry's document (collection \x1f doc id).
local n
if ARGV[3] == '1' then n = redis.call('LPUSH', KEYS[1], ARGV[1]) else n = redis.call('RPUSH', KEYS[1], ARGV[1]) end
if n == 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end
redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
return n
