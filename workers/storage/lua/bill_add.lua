-- One bill write (storage/bill.py), applied once: the writer's bitmap of the writes it has made
-- is checked and set in the same script as the totals, so a write sent again after its reply
-- was lost (a timeout) adds nothing.
-- KEYS: the writer's bitmap, then the totals' hashes (n), then the collection's runs (if a run).
-- ARGV: the write's number, the bitmap's ttl s, n, the run ("" if none), the run's time, then
--   (field, value, "f" for a float | "i" for an integer) for each figure.
local number, ttl, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SETBIT', KEYS[1], number, 1) == 1 then return 0 end
redis.call('EXPIRE', KEYS[1], ttl)
for t = 1, n do
  for i = 6, #ARGV, 3 do
    if ARGV[i + 2] == 'f' then
      redis.call('HINCRBYFLOAT', KEYS[1 + t], ARGV[i], ARGV[i + 1])
    else
      redis.call('HINCRBY', KEYS[1 + t], ARGV[i], ARGV[i + 1])
    end
  end
end
if ARGV[4] ~= '' then redis.call('ZADD', KEYS[2 + n], 'NX', ARGV[5], ARGV[4]) end
return 1
