-- KEYS: doc hash, counts hash, docs set, the collection's seq counter, backlog bytes, failed index,
-- in-flight index. ARGV: doc_id, version, meta hash, now, stale after (s), the seq to take ('' for
-- the next of the counter: a rebuild takes the live document's), its bytes (reserved in the backlog
-- while it is in flight; a previous version's reservation given back first), member, now. Returns
-- {status, seq}: status 'queued', or 'in_flight' when this very version is being processed (and has
-- moved within ``stale after``).
--! include state_moves
local version, state, updated = unpack(redis.call('HMGET', KEYS[1], 'version', 'state', 'updated'))
if version == ARGV[2] and (state == 'queued' or state == 'chunked' or state == 'situated')
   and tonumber(updated or '0') > tonumber(ARGV[4]) - tonumber(ARGV[5]) then
  return {'in_flight', redis.call('HGET', KEYS[1], 'seq') or '0'}
end
local seq = ARGV[6]
if seq == '' then seq = redis.call('INCR', KEYS[4]) end
move(KEYS[1], KEYS[2], state, 'queued')
release(KEYS[1])
local fields = {'state', 'queued', 'version', ARGV[2], 'seq', seq, 'meta_hash', ARGV[3], 'error', '',
                'submitted', ARGV[4], 'updated', ARGV[4], 'size', ARGV[7]}
if tonumber(ARGV[7]) > 0 then
  redis.call('INCRBY', KEYS[5], ARGV[7])
  fields[#fields + 1], fields[#fields + 2] = 'backlog', ARGV[7]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('SADD', KEYS[3], ARGV[1])
moved('queued', state)
return {'queued', tostring(seq)}
