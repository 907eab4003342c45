-- KEYS: doc hash, counts hash, docs set, backlog bytes, failed index, in-flight index. ARGV: doc_id, reason, now, member, now.
-- A document refused at submission.
--! include state_moves
local state = redis.call('HGET', KEYS[1], 'state')
move(KEYS[1], KEYS[2], state, 'failed')
redis.call('HSET', KEYS[1], 'state', 'failed', 'version', '', 'error', ARGV[2], 'updated', ARGV[3])
redis.call('SADD', KEYS[3], ARGV[1])
moved('failed', state)
return 1
