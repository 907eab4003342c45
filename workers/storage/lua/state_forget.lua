-- KEYS: doc hash, counts hash, docs set, backlog bytes, failed index, in-flight index. ARGV: doc_id, the seq the caller saw ("" for
-- any), member, now. Returns the state it had, or false (gone, or submitted again since the caller looked).
--! include state_moves
local state, seq = unpack(redis.call('HMGET', KEYS[1], 'state', 'seq'))
if not state then return false end
if ARGV[2] ~= '' and (seq or '0') ~= ARGV[2] then return false end
move(KEYS[1], KEYS[2], state, nil)
release(KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[3], ARGV[1])
moved(nil, state)
return state
