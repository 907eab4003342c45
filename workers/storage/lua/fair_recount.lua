-- Check, and if they drifted rebuild, the waiting counts from the lines (storage/fairqueue.py).
-- KEYS[1]: the waiting hash, KEYS[2]: unused (the total it once had), KEYS[3]: the sending hash, KEYS[4]: the queued
-- hash (queue -> admitted, not yet received: rebuilt from the sending hash when it disagrees), then
-- the rings.
-- ARGV[1], ARGV[2]: the gate's key prefix and line part (keys.FAIR_LAYOUT's first two: a line is
-- prefix .. queue .. line .. collection, as keys.fair_line builds it), ARGV[3], ARGV[4] unused
-- (the rest of the layout), then each ring's queue name (in KEYS' order: ARGV[i] for KEYS[i]).
-- Returns {counted before, entries held, 1 if rebuilt}. Atomic: nothing parks meanwhile.
local prefix, line_part = ARGV[1], ARGV[2]
local held = redis.call('HLEN', KEYS[3])
local queued = 0
for _, n in ipairs(redis.call('HVALS', KEYS[4])) do queued = queued + tonumber(n) end
if queued ~= held then
  local per_queue = {}
  for _, raw in ipairs(redis.call('HVALS', KEYS[3])) do
    local q = cjson.decode(raw).queue
    per_queue[q] = (per_queue[q] or 0) + 1
  end
  redis.call('DEL', KEYS[4])
  for q, n in pairs(per_queue) do redis.call('HSET', KEYS[4], q, n) end
end
for i = 5, #KEYS do
  for _, collection in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
    held = held + redis.call('LLEN', prefix .. ARGV[i] .. line_part .. collection)
  end
end
local counted = 0
for _, n in ipairs(redis.call('HVALS', KEYS[1])) do counted = counted + tonumber(n) end
if counted == held then return {counted, held, 0} end
local per_doc = {}
local function count(raw)
  local e = cjson.decode(raw)
  local doc = e.collection .. '\031' .. tostring(e.args[2])
  per_doc[doc] = (per_doc[doc] or 0) + 1
end
for _, raw in ipairs(redis.call('HVALS', KEYS[3])) do count(raw) end
for i = 5, #KEYS do
  for _, collection in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
    for _, raw in ipairs(redis.call('LRANGE', prefix .. ARGV[i] .. line_part .. collection, 0, -1)) do count(raw) end
  end
end
redis.call('DEL', KEYS[1])
for doc, n in pairs(per_doc) do redis.call('HSET', KEYS[1], doc, n) end
redis.call('DEL', KEYS[2])
return {counted, held, 1}
