-- Shared by the state scripts (included by `--! include state_moves`): move the per-state
-- counters with the state, the document in or out of the in-flight index (the script's last
-- key; the member is ARGV[#ARGV - 1], the time ARGV[#ARGV]), in or out of the collection's failed
-- index (the key before it; the document id is ARGV[1]), and its bytes out of the backlog (the
-- key before that) when it leaves flight (the hash's 'backlog': what its submission reserved).
-- ``moved`` is told the state left, so the failed index is touched only by a document entering or
-- leaving it.
local function move(doc, counts, old, new)
  if old == new then return end
  if old then redis.call('HINCRBY', counts, old, -1) end
  if new then redis.call('HINCRBY', counts, new, 1) end
end
local function moved(state, old)
  local member, now = ARGV[#ARGV - 1], ARGV[#ARGV]
  if state == 'queued' or state == 'chunked' or state == 'situated' then
    redis.call('ZADD', KEYS[#KEYS], now, member)
  else
    redis.call('ZREM', KEYS[#KEYS], member)
  end
  if state == 'failed' then
    redis.call('ZADD', KEYS[#KEYS - 1], now, ARGV[1])
  elseif old == 'failed' then  -- only a failed document is in the failed index
    redis.call('ZREM', KEYS[#KEYS - 1], ARGV[1])
  end
end
local function release(doc, backlog)
  local held = tonumber(backlog or redis.call('HGET', doc, 'backlog') or '0')
  if held > 0 then
    redis.call('DECRBY', KEYS[#KEYS - 2], held)
    redis.call('HDEL', doc, 'backlog')
  end
end
local function leaving(doc, state, backlog)
  if state ~= 'queued' and state ~= 'chunked' and state ~= 'situated' then release(doc, backlog or '0') end
end
local rank = {queued = 0, chunked = 1, situated = 2, indexed = 3}
