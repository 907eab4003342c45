-- A kept original gone (its document deleted, its collection dropped): its bytes leave the budget.
-- KEYS[1]: the kept original, KEYS[2]: its version, KEYS[3]: the bytes every kept original takes.
local size = redis.call('STRLEN', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
if size > 0 then redis.call('DECRBY', KEYS[3], size) end
return size
