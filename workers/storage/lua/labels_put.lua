-- Keep a labelled question (storage/labels.py) in one step: read, merge and write with no other
-- writer in between, so marks posted at once on one question all survive.
-- KEYS[1]: the collection's labels hash.
-- ARGV: id, the label (JSON: its gold and not_relevant are this call's marks), the most labels a
--       collection keeps, mode ("merge": add to the question's marks; "replace": an import's
--       line), the most answers, the most not-relevant marks a label holds.
-- Returns {outcome, the label as kept (JSON)}. Outcomes: new, merged, replaced; kept (a person's
-- label left as it was: a generated twin is never merged into it, nor an import over it);
-- full (the collection holds its most); too_many (the label would pass its bounds).
local function key(mark)
  local which = mark['chunk']
  if which == nil or which == cjson.null then which = mark['text'] end
  if which == nil or which == cjson.null then which = mark['page'] end
  return tostring(mark['doc_id']) .. '\0' .. tostring(which)
end

local function list(value)  -- cjson reads an empty JSON array as an empty table: either is a list
  if type(value) ~= 'table' then return {} end
  return value
end

local function union(old, new, drop)  -- old's marks not in drop, then new's (a newer mark wins)
  local gone, out, at = {}, {}, {}
  for _, mark in ipairs(drop) do gone[key(mark)] = true end
  for _, group in ipairs({old, new}) do
    for _, mark in ipairs(group) do
      local k = key(mark)
      if group == new or not gone[k] then
        if at[k] then out[at[k]] = mark else table.insert(out, mark); at[k] = #out end
      end
    end
  end
  return out
end

local label = cjson.decode(ARGV[2])
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return {'full', ''} end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'new', ARGV[2]}
end
local before = cjson.decode(raw)
if (before['source'] or 'person') == 'person' and (label['source'] ~= 'person' or ARGV[4] == 'replace') then
  return {'kept', raw}
end
local outcome = 'replaced'
if ARGV[4] == 'merge' then
  local marked_not = list(label['not_relevant'])
  label['gold'] = union(list(before['gold']), list(label['gold']), marked_not)
  label['not_relevant'] = union(list(before['not_relevant']), marked_not, label['gold'])
  outcome = 'merged'
end
if #list(label['gold']) > tonumber(ARGV[5]) or #list(label['not_relevant']) > tonumber(ARGV[6]) then
  return {'too_many', raw}
end
local kept = cjson.encode(label)
redis.call('HSET', KEYS[1], ARGV[1], kept)
return {outcome, kept}
