-- Let parked work into Celery's queues, one collection at a time, round robin (storage/fairqueue.py).
-- KEYS[1]: the sending zset (id -> when admitted), KEYS[2]: the sending hash (id -> entry),
-- KEYS[3]: the queued hash (queue -> entries admitted and not yet received: kept by this script and
-- fair_confirm, so a queue's depth is one HGET, not an LLEN of each of Kombu's priority lists).
-- ARGV[1]: now, ARGV[2]: after how long an admission never confirmed is parked again (-1: not
--   looked for: the heartbeat's admission sweeps, the others only admit),
-- ARGV[3]: how many messages each queue may hold ahead of its workers,
-- ARGV[4..7]: the layout of the gate's keys (keys.FAIR_LAYOUT: prefix, line, ring and debt parts):
--   a line is prefix .. queue .. line .. collection, a ring prefix .. queue .. ring, the debts
--   prefix .. queue .. debt (keys.fair_line, fair_ring, fair_debts build the same),
-- then the names of the queues to admit into.
-- Returns the admitted entries; the caller sends each, then confirms it.
-- A collection in debt (turns its work took beyond one, charged by the worker) gives up one
-- turn per unit of debt to the others; alone, it is served anyway.
local now, stale, bound = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prefix, line_part, ring_part, debt_part = ARGV[4], ARGV[5], ARGV[6], ARGV[7]

local function park_again(raw)
  local e = cjson.decode(raw)
  local line = prefix .. e.queue .. line_part .. e.collection
  if redis.call('LPUSH', line, raw) == 1 then redis.call('RPUSH', prefix .. e.queue .. ring_part, e.collection) end
  if redis.call('HINCRBY', KEYS[3], e.queue, -1) < 0 then redis.call('HSET', KEYS[3], e.queue, 0) end
end

-- A sender that died between admitting and sending: its entries go back to the front of their lines.
for _, id in ipairs(stale < 0 and {} or redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - stale, 'LIMIT', 0, 100)) do
  local raw = redis.call('HGET', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  if raw then park_again(raw) end
end

local out = {}
for i = 8, #ARGV do
  local queue = ARGV[i]
  local room = bound - tonumber(redis.call('HGET', KEYS[3], queue) or '0')
  local ring = prefix .. queue .. ring_part
  local debts = prefix .. queue .. debt_part
  local skipped, admitted = 0, 0
  local in_debt = nil  -- looked up once there is a collection to serve
  while room > 0 do
    local collection = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    if not collection then break end
    if in_debt == nil then in_debt = redis.call('EXISTS', debts) == 1 end
    local debt = in_debt and tonumber(redis.call('HGET', debts, collection) or '0') or 0
    if debt >= 1 and skipped < redis.call('LLEN', ring) then
      -- its last work took more than its turns: this turn goes to the next collection
      if debt < 2 then redis.call('HDEL', debts, collection) else redis.call('HINCRBYFLOAT', debts, collection, -1) end
      skipped = skipped + 1
    else
      skipped = 0
      local line = prefix .. queue .. line_part .. collection
      local raw = redis.call('LPOP', line)
      if redis.call('LLEN', line) == 0 then redis.call('LREM', ring, 0, collection) end
      if raw then
        local id = cjson.decode(raw).id
        redis.call('ZADD', KEYS[1], now, id)
        redis.call('HSET', KEYS[2], id, raw)
        out[#out + 1] = raw
        room = room - 1
        admitted = admitted + 1
      end
    end
  end
  if admitted > 0 then redis.call('HINCRBY', KEYS[3], queue, admitted) end
end
return out
