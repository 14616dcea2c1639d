-- Jobs of one model waiting to be claimed: undelivered stream entries plus delayed retries.
-- KEYS[1] job stream   KEYS[2] delayed zset   ARGV[1] group
-- Every acknowledged entry is deleted, so undelivered = XLEN - pending.
local n = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  n = redis.call('XLEN', KEYS[1])
  local p = redis.pcall('XPENDING', KEYS[1], ARGV[1])
  if type(p) == 'table' and p.err == nil then n = n - p[1] end
end
return n + redis.call('ZCARD', KEYS[2])
