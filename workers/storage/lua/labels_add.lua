-- Keep a labelled question (storage/labels.py), within the collection's bound.
-- KEYS[1]: the collection's labels hash. ARGV: id, the label (JSON), the most a collection keeps.
-- Returns 1 if kept (new or replaced), 0 if the collection holds its most already.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
