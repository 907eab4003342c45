-- Park one piece of work in its collection's line for a queue (see storage/fairqueue.py).
-- KEYS[1]: the collection's line, KEYS[2]: the queue's ring of collections with work parked.
-- ARGV[1]: the entry (JSON), ARGV[2]: the collection, ARGV[3]: "1" to go to the front of the line.
local n
if ARGV[3] == '1' then n = redis.call('LPUSH', KEYS[1], ARGV[1]) else n = redis.call('RPUSH', KEYS[1], ARGV[1]) end
if n == 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end
return n
