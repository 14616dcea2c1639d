-- 0-based place of a queued job in its model's queue, in O(log n) whatever the depth (read-only).
-- KEYS[1] job hash   KEYS[2] job stream   KEYS[3] delayed zset   KEYS[4] job stream's XADD counter
-- ARGV[1] group   ARGV[2] job id   ARGV[3] the pool's fair-share prefix (keys.fair_prefix; fair.lua)
-- Reply: position, or -1 when the job is not queued.
--
-- Waiting entries are the stream's undelivered ones: XLEN - pending, since every acknowledged entry
-- is deleted (commit.lua). They are the newest entries of the stream, so the entries ahead of a job
-- are the waiting ones less those added after it. commit.lua stores each entry's place in the
-- count of XADDs (`seq`, from KEYS[4]), hence: ahead = waiting - 1 - (added - seq). Exact in FIFO
-- order; a queued job canceled after this one was enqueued still counts as added after it, so each
-- such cancel makes the figure one lower than the truth (never higher, never below 0).
local cur = redis.call('HMGET', KEYS[1], 'status', 'entry', 'seq')
if cur[1] ~= 'queued' then return -1 end
-- Every call here is O(1) or O(log n) in the backlog: XLEN, GET, XINFO GROUPS (not XINFO STREAM, whose
-- reply carries the first and last entries whole), ZRANK, a one-entry XPENDING.
local waiting, added = 0, tonumber(redis.call('GET', KEYS[4]) or '0')
if redis.call('EXISTS', KEYS[2]) == 1 then
  waiting = redis.call('XLEN', KEYS[2])
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local name, pending = nil, 0
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'pending' then pending = g[i + 1] end
    end
    if name == ARGV[1] then waiting = waiting - pending end
  end
end
local entry = cur[2] or ''
if entry == '' then
  -- Waiting for a retry backoff: behind every waiting entry and the retries due before it.
  local rank = redis.call('ZRANK', KEYS[3], ARGV[2])
  if rank then return waiting + rank end
  -- Parked in the fair order: behind every waiting entry, then an upper bound of the parked jobs served
  -- before it, exact while every project with parked work has equal weight and a backlog at least as
  -- long as this job's place: r.N + k (r: the project's own jobs ahead, N: projects listed, k: those
  -- whose pass is not above this project's), never above the other parked jobs (docs/queue-protocol.md).
  local project = redis.call('HGET', KEYS[1], 'project')
  if not project or not ARGV[3] then return -1 end
  local base = ARGV[3]
  local r = redis.call('ZRANK', base .. 'q:' .. project, ARGV[2])
  if not r then return -1 end
  local pass = redis.call('ZSCORE', base .. 'projects', project) or '0'
  local n = redis.call('ZCARD', base .. 'projects')
  local k = redis.call('ZCOUNT', base .. 'projects', '-inf', pass) - 1
  if k < 0 then k = 0 end
  return waiting + math.min(r * math.max(n, 1) + k, redis.call('ZCARD', base .. 'parked') - 1)
end
-- Delivered but not started yet (a claim in flight): it is at the head.
if redis.call('XPENDING', KEYS[2], ARGV[1], entry, entry, 1)[1] then return 0 end
local seq = tonumber(cur[3] or '')
-- A job enqueued before entries carried `seq`: every waiting entry but its own (an upper bound).
if not seq then return math.max(0, waiting - 1) end
return math.max(0, waiting - 1 - (added - seq))
