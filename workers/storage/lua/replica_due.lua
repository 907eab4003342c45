-- The replicas left alone long enough to be probed again (storage/replicas.py), each claimed by
-- one caller for ARGV[1] seconds so that one worker probes it, not all.
-- KEYS: the down hash. ARGV: claim seconds, then the claim key's prefix. Returns the labels.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local due = {}
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local untill = tonumber(string.match(entries[i + 1], '^([%d.]+)|'))
  if untill <= now and redis.call('SET', ARGV[2] .. entries[i], '1', 'NX', 'EX', ARGV[1]) then
    due[#due + 1] = entries[i]
  end
end
return due
