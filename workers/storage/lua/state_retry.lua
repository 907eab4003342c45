-- KEYS: doc hash, counts hash, docs set, the collection's seq counter, backlog bytes, failed index,
-- in-flight index. ARGV: doc_id, version, seq seen, now, member, now. A retry of a failed version:
-- queued again only if the document is still that failed submission, never over a newer version
-- submitted since; its bytes reserved in the backlog again. Returns {status, seq}.
--! include state_moves
local version, state, seq = unpack(redis.call('HMGET', KEYS[1], 'version', 'state', 'seq'))
if state ~= 'failed' or version ~= ARGV[2] or (seq or '0') ~= ARGV[3] then
  return {'changed', seq or '0'}
end
local new_seq = redis.call('INCR', KEYS[4])
move(KEYS[1], KEYS[2], state, 'queued')
redis.call('HSET', KEYS[1], 'state', 'queued', 'seq', new_seq, 'error', '', 'submitted', ARGV[4], 'updated', ARGV[4])
local size = tonumber(redis.call('HGET', KEYS[1], 'size') or '0')
if size > 0 then
  redis.call('INCRBY', KEYS[5], size)
  redis.call('HSET', KEYS[1], 'backlog', size)
end
moved('queued', state)
return {'queued', tostring(new_seq)}
