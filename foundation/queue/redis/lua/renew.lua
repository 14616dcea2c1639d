-- Extend a lease: reset the idle time of the job's pending entry (XCLAIM ... JUSTID), fenced.
-- KEYS[1] job hash   KEYS[2] job stream
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] attempt   ARGV[4] entry id
-- Reply: 1 renewed, 0 stale (another attempt owns the job, or it ended).
local cur = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'entry')
if cur[1] ~= 'running' or tonumber(cur[2]) ~= tonumber(ARGV[3]) or cur[3] ~= ARGV[4] then
  return 0
end
local r = redis.call('XCLAIM', KEYS[2], ARGV[1], ARGV[2], 0, ARGV[4], 'JUSTID')
if #r == 0 then return 0 end
return 1
