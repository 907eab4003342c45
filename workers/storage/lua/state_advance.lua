-- KEYS: doc hash, counts hash, docs set, backlog bytes, failed index, in-flight index. ARGV: doc_id, version, new state, then
-- field/value pairs, member, now. Returns 1 if written; 0 if the version is another one, the document
-- is gone, or the move would go backwards (states.py's docstring).
--! include state_moves
local current = redis.call('HGET', KEYS[1], 'version')
if not current or current ~= ARGV[2] then return 0 end
local old = redis.call('HGET', KEYS[1], 'state')
local new = ARGV[3]
if new == 'failed' then
  if old == 'indexed' or old == 'failed' then return 0 end
elseif old == 'failed' or (rank[old] or -1) >= rank[new] then
  return 0
end
move(KEYS[1], KEYS[2], old, new)
redis.call('HSET', KEYS[1], 'state', new)
for i = 4, #ARGV - 2, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
moved(new)
leaving(KEYS[1], new)
return 1
