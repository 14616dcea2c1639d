-- Fair share by project inside a model pool (foundation/queue/fairness.py), the part both commit.lua and
-- claim.lua run. `base` is keys.fair_prefix(model): every key below is in the pool's slot.
--   base..'projects'      zset project -> pass (lowest served first; ties: the project id): projects
--                         with parked work
--   base..'resting'       zset project -> pass: projects whose queue ran dry with their last turn not yet
--                         worked off (pass above the clock); trimmed to those at every hand-over
--   base..'q:'..project   zset job id -> order (base..'seq'): the project's parked jobs, FIFO
--   base..'parked'        zset job id -> parked at (ms): every parked job of the pool (depth, oldest age)
--   base..'run:'..project  set: the project's jobs running     } together what max_running counts;
--   base..'wait:'..project set: its queued jobs in the stream   } wait: + its parked ones for max_queued
--   base..'clock'         the pass the last served job started from (where a returning project joins)
-- A parked job's hash has entry '' (as a retry in backoff); the stream holds at most about one entry
-- handed over by the fair order, so entries added by other means (a retry due, a re-delivery, a
-- version from before fair share) keep their FIFO place ahead of parked work.

local function fair_park(base, project, job_id, now_ms)
  local q = base .. 'q:' .. project
  -- A new project joins at the clock; one resting rejoins at its own pass when that is higher.
  if not redis.call('ZSCORE', base .. 'projects', project) then
    local start = tonumber(redis.call('GET', base .. 'clock') or '0')
    local rested = redis.call('ZSCORE', base .. 'resting', project)
    if rested then
      start = math.max(start, tonumber(rested))
      redis.call('ZREM', base .. 'resting', project)
    end
    redis.call('ZADD', base .. 'projects', start, project)
  end
  redis.call('ZADD', q, redis.call('INCR', base .. 'seq'), job_id)
  redis.call('ZADD', base .. 'parked', now_ms, job_id)
end

-- A parked job leaves the fair order without being served (canceled).
-- Where a job of `project` stands now: running, queued in the stream, or neither (parked, in a backoff, ended).
local function fair_follow(base, project, job_id, status, entry)
  local run, wait = base .. 'run:' .. project, base .. 'wait:' .. project
  if status == 'running' then
    redis.call('SADD', run, job_id); redis.call('SREM', wait, job_id)
  elseif status == 'queued' and entry ~= '' then
    redis.call('SADD', wait, job_id); redis.call('SREM', run, job_id)
  else
    redis.call('SREM', run, job_id); redis.call('SREM', wait, job_id)
  end
end

-- Jobs of `project` waiting in the pool: parked and in the stream (max_queued).
local function fair_queued(base, project)
  return redis.call('ZCARD', base .. 'q:' .. project) + redis.call('SCARD', base .. 'wait:' .. project)
end

-- A project whose queue ran dry leaves the list, resting with its pass while that is above the clock.
local function fair_rest(base, project)
  local pass = redis.call('ZSCORE', base .. 'projects', project)
  redis.call('ZREM', base .. 'projects', project)
  if pass and tonumber(pass) > tonumber(redis.call('GET', base .. 'clock') or '0') then
    redis.call('ZADD', base .. 'resting', pass, project)
  end
end

local function fair_unpark(base, project, job_id)
  if redis.call('ZREM', base .. 'q:' .. project, job_id) == 1 then
    redis.call('ZREM', base .. 'parked', job_id)
    if redis.call('ZCARD', base .. 'q:' .. project) == 0 then fair_rest(base, project) end
  end
end

-- The next parked job in fair order, taken out of it and charged to its project (pass + its hash's
-- `cost` / weight: fairness.job_cost): job id, project; nil when every listed project among the first
-- 64 is dry or at its max_running. Dry projects met on the way are dropped from the list. `shares`:
-- cjson-decoded {project: [weight, max_running]} overrides; `prefix`: keys.job_record_prefix.
local function fair_pick(base, prefix, shares, weight, max_running)
  local projects = base .. 'projects'
  local listed = redis.call('ZRANGE', projects, 0, 63, 'WITHSCORES')
  for i = 1, #listed, 2 do
    local project, pass = listed[i], tonumber(listed[i + 1])
    local q = base .. 'q:' .. project
    local head = redis.call('ZRANGE', q, 0, 0)
    if #head == 0 then
      redis.call('ZREM', projects, project)
    else
      local share = shares[project]
      local w, cap = weight, max_running
      if share then w, cap = tonumber(share[1]), tonumber(share[2]) end
      if redis.call('SCARD', base .. 'run:' .. project) + redis.call('SCARD', base .. 'wait:' .. project) < cap then
        local job_id = head[1]
        redis.call('ZREM', q, job_id)
        redis.call('ZREM', base .. 'parked', job_id)
        redis.call('SET', base .. 'clock', listed[i + 1])
        local cost = tonumber(redis.call('HGET', prefix .. job_id, 'cost') or '1') or 1
        redis.call('ZADD', projects, pass + cost / w, project)
        -- Resting passes at or below the clock say no more than joining at the clock does: dropped.
        redis.call('ZREMRANGEBYSCORE', base .. 'resting', '-inf', listed[i + 1])
        if redis.call('ZCARD', q) == 0 then fair_rest(base, project) end
        return job_id, project
      end
    end
  end
  return nil
end

-- Hand the next parked job to the stream when the stream has nothing waiting for the group: its entry
-- (entries.encode_payload's layout), its `seq` (position.lua), rev + 1 so a plan built before this sees
-- a conflict, and its place in the project's wait set. The entry id, or nil when nothing was handed over.
local function fair_top_up(base, stream, group, prefix, model, shares, weight, max_running)
  if redis.call('EXISTS', stream) == 1 then
    local waiting = redis.call('XLEN', stream)
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local name, pending = nil, 0
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i + 1] end
        if g[i] == 'pending' then pending = g[i + 1] end
      end
      if name == group then waiting = waiting - pending end
    end
    if waiting > 0 then return nil end
  else
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  end
  local job_id, project = fair_pick(base, prefix, shares, weight, max_running)
  if not job_id then return nil end
  local entry = redis.call('XADD', stream, '*', 'payload',
    '{"v":1,"job_id":"' .. job_id .. '","model":"' .. model .. '"}')
  local counter = stream .. ':seq'  -- keys.job_stream_seq
  if redis.call('EXISTS', counter) == 0 then  -- as commit.lua's next_seq: the stream's own count, this entry included
    local info = redis.call('XINFO', 'STREAM', stream)
    for i = 1, #info, 2 do
      if info[i] == 'entries-added' then redis.call('SET', counter, info[i + 1] - 1) end
    end
  end
  local job = prefix .. job_id
  redis.call('HSET', job, 'entry', entry, 'seq', redis.call('INCR', counter),
             'rev', tonumber(redis.call('HGET', job, 'rev') or '0') + 1)
  redis.call('SADD', base .. 'wait:' .. project, job_id)
  return entry
end
