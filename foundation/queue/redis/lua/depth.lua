-- Jobs of one model waiting to be claimed: undelivered stream entries, delayed retries and jobs parked
-- in the fair order (fair.lua).
-- KEYS[1] job stream   KEYS[2] delayed zset   KEYS[3] the pool's parked zset (keys.fair_parked)   ARGV[1] group
-- Every acknowledged entry is deleted, so undelivered = XLEN - pending (the group's count, O(1):
-- XINFO GROUPS, not the per-consumer summary of XPENDING).
local n = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  n = redis.call('XLEN', KEYS[1])
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local name, pending = nil, 0
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'pending' then pending = g[i + 1] end
    end
    if name == ARGV[1] then n = n - pending end
  end
end
return n + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
