-- A call's place on a replica (storage/replicas.py): the replica its document's calls go to, and
-- one of that replica's slots if one is free. Every worker routes through here, so the fleet
-- agrees on where a document is and on how busy each replica is.
-- KEYS: the document's replica, the down hash, the moves hash, the round-robin turn, the replicas
--   listed (label -> when a worker last listed it), then each replica's load (calls sent and not
--   answered), then each replica's slots (calls in one), then each replica's waiting line (calls
--   waiting for a slot, by arrival), all three in the document's order of preference
--   (rendezvous), n of each.
-- ARGV: n, call id, slots per replica, imbalance margin, lease s, the document's ttl s, routing
--   (affinity | round-robin | least-loaded), held (the 1-based replica this call already waits
--   on, 0 if none), how long ago another worker's listing still counts (s), leave (1: this call
--   has waited its deadline on held: with affinity, its document may move to a replica with a
--   free slot; the other routings keep a call where they sent it, as they always did), then
--   the n labels in the same order.
-- Returns {the chosen replica (0: none is up), 1 if the call holds a slot, the label the
--   document moved away from or false, the label of the document's replica this call went around
--   (one this caller does not list, up on another worker's list) or false}.
local n = tonumber(ARGV[1])
local id, cap, margin = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease, ttl, routing, held = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local listed_within, leave = tonumber(ARGV[9]), ARGV[10] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6

local function label(i) return ARGV[10 + i] end
local function load_key(i) return KEYS[5 + i] end
local function slots_key(i) return KEYS[5 + n + i] end
local function line_key(i) return KEYS[5 + 2 * n + i] end
local function up(i) return redis.call('HEXISTS', KEYS[2], label(i)) == 0 end
local function load(i)
  redis.call('ZREMRANGEBYSCORE', load_key(i), '-inf', now)  -- entries of calls a lost worker made
  return redis.call('ZCARD', load_key(i))
end
local function free(i)
  redis.call('ZREMRANGEBYSCORE', slots_key(i), '-inf', now)
  return cap - redis.call('ZCARD', slots_key(i))
end
local function leave_line(i)
  redis.call('ZREM', load_key(i), id)
  redis.call('ZREM', slots_key(i), id)
  redis.call('ZREM', line_key(i), id)
end
-- First come, first served: a free slot goes to the call that has waited longest. A waiter
-- whose worker is gone (its place in the load lapsed, no longer renewed) leaves the line.
local function take_slot(i)
  redis.call('ZADD', load_key(i), now + lease, id)
  if redis.call('ZSCORE', slots_key(i), id) then
    redis.call('ZADD', slots_key(i), now + lease, id)
    return 1
  end
  local open = free(i)
  local line = line_key(i)
  if open > 0 then
    load(i)
    local head = redis.call('ZRANGE', line, 0, open - 1)
    for _, waiter in ipairs(head) do
      if waiter ~= id and not redis.call('ZSCORE', load_key(i), waiter) then redis.call('ZREM', line, waiter) end
    end
    local rank = redis.call('ZRANK', line, id)
    if (rank and rank < open) or (not rank and redis.call('ZCARD', line) < open) then
      redis.call('ZREM', line, id)
      redis.call('ZADD', slots_key(i), now + lease, id)
      return 1
    end
  end
  redis.call('ZADD', line, 'NX', now, id)
  return 0
end

if held > 0 then
  if up(held) then
    if not (leave and routing == 'affinity' and free(held) <= 0) then return {held, take_slot(held), false, false} end
    -- Waited its deadline on a replica that stayed full: the document moves to the first in its
    -- order with a free slot (its prefix is computed there again, once), if there is one.
    for i = 1, n do
      if i ~= held and up(i) and free(i) > 0 then
        leave_line(held)
        redis.call('SET', KEYS[1], label(i), 'EX', ttl)
        redis.call('HINCRBY', KEYS[3], label(held), 1)
        return {i, take_slot(i), label(held), false}
      end
    end
    return {held, take_slot(held), false, false}
  end
  leave_line(held)  -- it went down while this call waited: choose again
end
local alive = {}
for i = 1, n do if up(i) then alive[#alive + 1] = i end end
if #alive == 0 then return {0, 0, false, false} end

local chosen, moved, around = nil, false, false
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
      local mine, seen = false, redis.call('ZSCORE', KEYS[5], current)
      for i = 1, n do if label(i) == current then mine = true end end
      if not mine and redis.call('HEXISTS', KEYS[2], current) == 0 and seen and tonumber(seen) >= now - listed_within then
        -- Up, on another worker's list, not on this caller's: the workers disagree on the fleet.
        -- This call goes where this caller can send it; the document stays where it is, so two
        -- lists never move it back and forth.
        around = current
      else
        moved = current
        redis.call('HINCRBY', KEYS[3], current, 1)
      end
    end
  end
  if not around then redis.call('SET', KEYS[1], label(chosen), 'EX', ttl) end
end
return {chosen, take_slot(chosen), moved, around}
