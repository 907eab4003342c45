-- A collector takes the oldest documents of a pool for one bundle (see storage/bundle_pool.py),
-- or what it took already when it is delivered again.
-- KEYS[1]: the pool, KEYS[2]: its weight, KEYS[3]: the waiting set, KEYS[4]: what this bundle took.
-- ARGV[1]: documents at most, ARGV[2]: bytes at most (the first is taken whatever it weighs),
-- ARGV[3]: the collection, ARGV[4]: how long what was taken is remembered (s).
-- Returns {entries taken (JSON), documents left in the pool}.
local taken = redis.call('GET', KEYS[4])
if taken then return {cjson.decode(taken), redis.call('LLEN', KEYS[1])} end
local out, weight = {}, 0
local most, heaviest = tonumber(ARGV[1]), tonumber(ARGV[2])
while #out < most do
  local entry = redis.call('LINDEX', KEYS[1], 0)
  if not entry then break end
  local doc = cjson.decode(entry)
  if #out > 0 and weight + doc[3] > heaviest then break end
  redis.call('LPOP', KEYS[1])
  redis.call('SREM', KEYS[3], ARGV[3] .. '\31' .. doc[1])
  weight = weight + doc[3]
  out[#out + 1] = entry
end
local left = redis.call('LLEN', KEYS[1])
if left == 0 then redis.call('DEL', KEYS[2]) else redis.call('DECRBY', KEYS[2], weight) end
if #out > 0 then redis.call('SET', KEYS[4], cjson.encode(out), 'EX', ARGV[4]) end
return {out, left}
