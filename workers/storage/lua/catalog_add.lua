-- A new collection's entry and its name in the catalog's set, together (storage/catalog.py).
-- KEYS[1]: the collection's entry, KEYS[2]: the set of names. ARGV[1]: the name, ARGV[2]: its settings.
-- Returns 1 if it was created, 0 if the entry was there already (SET NX: the first creator wins).
if redis.call('SET', KEYS[1], ARGV[2], 'NX') then
  redis.call('SADD', KEYS[2], ARGV[1])
  return 1
end
return 0
