-- A call's place on a replica (storage/replicas.py): the replica its document's calls go to, and
-- one of that replica's slots if one is free. Every worker routes through here, so the fleet
-- agrees on where a document is and on how busy each replica is.
-- KEYS: the document's replica, the down hash, the moves hash, the round-robin turn, then each
--   replica's load (calls sent and not answered), then each replica's slots (calls in one), both
--   in the document's order of preference (rendezvous), n of each.
-- ARGV: n, call id, slots per replica, imbalance margin, lease s, the document's ttl s, routing
--   (affinity | round-robin | least-loaded), held (the 1-based replica this call already waits
--   on, 0 if none), then the n labels in the same order.
-- Returns {the chosen replica (0: none is up), 1 if the call holds a slot, the label the
--   document moved away from or false}.
local n = tonumber(ARGV[1])
local id, cap, margin = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease, ttl, routing, held = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6

local function label(i) return ARGV[8 + i] end
local function up(i) return redis.call('HEXISTS', KEYS[2], label(i)) == 0 end
local function load(i)
  redis.call('ZREMRANGEBYSCORE', KEYS[4 + i], '-inf', now)  -- entries of calls a lost worker made
  return redis.call('ZCARD', KEYS[4 + i])
end
local function take_slot(i)
  redis.call('ZADD', KEYS[4 + i], now + lease, id)
  local slots = KEYS[4 + n + i]
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  if redis.call('ZSCORE', slots, id) or redis.call('ZCARD', slots) < cap then
    redis.call('ZADD', slots, now + lease, id)
    return 1
  end
  return 0
end

if held > 0 then
  if up(held) then return {held, take_slot(held), false} end
  redis.call('ZREM', KEYS[4 + held], id)  -- it went down while this call waited: choose again
  redis.call('ZREM', KEYS[4 + n + held], id)
end
local alive = {}
for i = 1, n do if up(i) then alive[#alive + 1] = i end end
if #alive == 0 then return {0, 0, false} end

local chosen, moved = nil, false
if routing == 'round-robin' then
  chosen = alive[(redis.call('INCR', KEYS[4]) - 1) % #alive + 1]
elseif routing == 'least-loaded' then
  local least
  for _, i in ipairs(alive) do
    local l = load(i)
    if least == nil or l < least then least, chosen = l, i end
  end
else
  -- affinity: where the document already is, while that replica is up. A document placed anew
  -- has nothing cached anywhere yet, so it goes to the first in its order of preference with a
  -- free slot (no replica idles while new documents wait on another); with none free, to the
  -- first whose load is within the margin of the least loaded.
  local current = redis.call('GET', KEYS[1])
  for _, i in ipairs(alive) do if label(i) == current then chosen = i end end
  if chosen == nil then
    local loads, least = {}, nil
    for _, i in ipairs(alive) do
      loads[i] = load(i)
      if least == nil or loads[i] < least then least = loads[i] end
    end
    for _, i in ipairs(alive) do
      if loads[i] < cap then chosen = i break end
    end
    if chosen == nil then
      for _, i in ipairs(alive) do
        if loads[i] <= least + margin then chosen = i break end
      end
    end
    if current then
      moved = current
      redis.call('HINCRBY', KEYS[3], current, 1)
    end
  end
  redis.call('SET', KEYS[1], label(chosen), 'EX', ttl)
end
return {chosen, take_slot(chosen), moved}
