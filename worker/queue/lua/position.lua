-- 0-based place of a queued job in its model's queue: undelivered entries ahead of its entry, or,
-- while it waits for a retry, every undelivered entry plus the delayed jobs due before it.
-- KEYS[1] job hash   KEYS[2] job stream   KEYS[3] delayed zset
-- ARGV[1] group   ARGV[2] job id
-- Reply: position, or -1 when the job is not queued.
local cur = redis.call('HMGET', KEYS[1], 'status', 'entry')
if cur[1] ~= 'queued' then return -1 end
local last = '0-0'
if redis.call('EXISTS', KEYS[2]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local name, l = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then l = g[i + 1] end
    end
    if name == ARGV[1] then last = l end
  end
end
local entry = cur[2] or ''
if entry ~= '' then
  -- Delivered but not started yet (a claim in flight): it is at the head.
  if redis.call('XPENDING', KEYS[2], ARGV[1], entry, entry, 1)[1] then return 0 end
  return #redis.call('XRANGE', KEYS[2], '(' .. last, '(' .. entry)
end
local ahead = 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  ahead = #redis.call('XRANGE', KEYS[2], '(' .. last, '+')
end
local rank = redis.call('ZRANK', KEYS[3], ARGV[2])
if not rank then return -1 end
return ahead + rank
