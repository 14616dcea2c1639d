-- What one model's pool holds, for choosing which model to claim from (read-only).
-- KEYS[1] job stream   KEYS[2] delayed zset   KEYS[3] the pool's parked zset (keys.fair_parked)
-- ARGV[1] group
-- Reply: {now_ms, oldest waiting entry id or '', due delayed count}; with no entry waiting, the oldest
-- job parked in the fair order stands for it ('<parked at ms>-0'), so a model whose work is parked is
-- weighed by its age as well
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local oldest = ''
if redis.call('EXISTS', KEYS[1]) == 1 then
  local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
  for _, g in ipairs(groups) do
    local name, last = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == ARGV[1] then
      local nxt = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', 1)
      if #nxt > 0 then oldest = nxt[1][1] end
    end
  end
end
if oldest == '' then
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if #first > 0 then oldest = string.format('%d-0', tonumber(first[2])) end
end
local due = redis.call('ZCOUNT', KEYS[2], '-inf', now_ms)
return {tostring(now_ms), oldest, due}
