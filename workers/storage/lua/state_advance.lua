-- KEYS: doc hash, counts hash, docs set, backlog bytes, failed index, in-flight index. ARGV: doc_id, version, new state, then
-- field/value pairs, member, now. Returns 1 if written; 0 if the version is another one, the document
-- is gone, or the move would go backwards (states.py's docstring).
--! include state_moves
local current, old, backlog = unpack(redis.call('HMGET', KEYS[1], 'version', 'state', 'backlog'))
if not current or current ~= ARGV[2] then return 0 end
local new = ARGV[3]
if new == 'failed' then
  if old == 'indexed' or old == 'failed' then return 0 end
elseif old == 'failed' or (rank[old] or -1) >= rank[new] then
  return 0
end
move(KEYS[1], KEYS[2], old, new)
local fields = {'state', new}
for i = 4, #ARGV - 2 do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
moved(new, old)
leaving(KEYS[1], new, backlog)
return 1
