-- Shared by the state scripts (included by `--! include state_moves`): move the per-state
-- counters with the state, and the document in or out of the in-flight index (the script's
-- last key; the member is ARGV[#ARGV - 1], the time ARGV[#ARGV]).
local function move(doc, counts, old, new)
  if old == new then return end
  if old then redis.call('HINCRBY', counts, old, -1) end
  if new then redis.call('HINCRBY', counts, new, 1) end
end
local function moved(state)
  local member, now = ARGV[#ARGV - 1], ARGV[#ARGV]
  if state == 'queued' or state == 'chunked' or state == 'situated' then
    redis.call('ZADD', KEYS[#KEYS], now, member)
  else
    redis.call('ZREM', KEYS[#KEYS], member)
  end
end
local rank = {queued = 0, chunked = 1, situated = 2, indexed = 3}
