-- Apply one planned change to a job atomically: check, write the record, move the stream entry,
-- append the event, dead-letter. Python builds the new record (pydantic); this script is the gate.
--
-- KEYS[1] job hash   KEYS[2] job stream   KEYS[3] delayed zset   KEYS[4] events stream
-- KEYS[5] job events stream   KEYS[6] dead-letter stream   KEYS[7] running set
-- KEYS[8] job stream's XADD counter   KEYS[9] job progress log    (all share the {m:<model>} slot)
-- ARGV[1] plan (JSON, see redis_scripts.Plan)   ARGV[2] new record JSON ('' keeps the stored one)
--
-- Record formats (records.RECORD_FORMAT): a plan that writes a record this version built carries
-- `format`, stored beside it on the hash; one that ends a newer version's record unread (`newer`) keeps
-- the stored format, and may move a status this version's table does not know (only to failed).
--
-- Queue position (position.lua): each new stream entry's place in the count of XADDs to the stream
-- (KEYS[8], INCR per entry) is stored on the hash as `seq`. A queue from before that key existed
-- starts the count at the stream's own `entries-added`, so old and new `seq` values agree. Retention: the change
-- that makes a job terminal gives its hash and its own events stream a TTL of plan.record_ttl_ms.
--
-- Fair share (fair.lua, prepended): a create with `park` (a project) waits in the fair order instead of
-- getting a stream entry, and so does any re-queue of a job whose hash names its project while
-- plan.fair_on; plan.fair_base (keys.fair_prefix(model)) and the weights and caps come with every commit.
--
-- Replies: {'ok', entry_id, event_id} | {'applied', entry_id, ''} | {'exists'} | {'full'} | {'missing'}
--          | {'conflict'} | {'fenced'} | {'illegal', old_status, new_status}
local function entries_added(stream)
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'entries-added' then return info[i + 1] end
  end
  return 0
end

local function next_seq(stream, counter)
  if redis.call('EXISTS', counter) == 0 then redis.call('SET', counter, entries_added(stream) - 1) end
  return redis.call('INCR', counter)
end

local plan = cjson.decode(ARGV[1])
local job = KEYS[1]
local cur = redis.call('HMGET', job, 'rev', 'status', 'attempt', 'entry', 'released', 'plan')

-- 0. A plan that is already the last one applied was re-sent by the client after its reply was lost:
-- answer as the first run did (the job's entry is still the one that run left), change nothing.
if cur[6] and cur[6] == plan.plan_id then return {'applied', cur[4] or '', ''} end

-- 1. The record must be the one the plan was built from (optimistic check-and-set on rev).
if plan.create then
  if cur[1] then return {'exists'} end
  -- 1b. A project's cap of parked jobs (fairness.max_queued): refused before anything is written.
  if plan.park and plan.max_queued and fair_queued(plan.fair_base, plan.park) >= plan.max_queued then
    return {'full'}
  end
else
  if not cur[1] then return {'missing'} end
  if tonumber(cur[1]) ~= plan.rev then return {'conflict'} end
end

-- 2. Fencing: only the current attempt of a running job may write.
if plan.fence_attempt then
  if cur[2] ~= 'running' or tonumber(cur[3]) ~= plan.fence_attempt or cur[4] ~= plan.fence_entry then
    return {'fenced'}
  end
end

-- 3. A reaper acts only on an entry it still holds (its owner did not renew it meanwhile).
if plan.owned_by then
  local p = redis.call('XPENDING', KEYS[2], plan.group, plan.ack, plan.ack, 1)
  if #p == 0 or p[1][2] ~= plan.owned_by then return {'fenced'} end
end

-- 3b. The sweep acts only on a running record whose entry is pending for nobody (it has no lease).
if plan.unleased then
  if cur[2] ~= 'running' then return {'fenced'} end
  local e = cur[4] or ''
  if e ~= '' and redis.call('EXISTS', KEYS[2]) == 1
     and #redis.call('XPENDING', KEYS[2], plan.group, e, e, 1) > 0 then
    return {'fenced'}
  end
end

-- 4. The lifecycle table.
local old = cur[2] or 'queued'
local status = plan.status or old
if not plan.create and status ~= old and not allowed(old, status)
   and not (plan.newer and ALLOWED[old] == nil and status == 'failed') then
  return {'illegal', old, status}
end

-- 5. Move the stream entry. Acknowledging always deletes, so the stream holds only live entries.
local entry = cur[4] or ''
local seq = nil
if plan.ack and plan.ack ~= '' then
  redis.call('XACK', KEYS[2], plan.group, plan.ack)
  redis.call('XDEL', KEYS[2], plan.ack)
  entry = ''
end
if plan.undelay then redis.call('ZREM', KEYS[3], plan.job_id) end
if plan.delay_ms then
  -- Due on this server's clock, the one the claim path (claim.lua, scan.lua) compares due times with:
  -- a worker's own clock never decides when its retry becomes due.
  local t = redis.call('TIME')
  local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(plan.delay_ms)
  redis.call('ZADD', KEYS[3], due, plan.job_id)
  entry = ''
end
-- Under fair share a job of a known project that goes back to the queue (released, re-delivered, a
-- retry due) is parked at the end of its project's queue instead, as a create is (step 6b).
local park = plan.park
if plan.payload and plan.fair_on and not plan.create then park = redis.call('HGET', job, 'project') or nil end
if plan.payload and not park then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('XGROUP', 'CREATE', KEYS[2], plan.group, '0', 'MKSTREAM')
  end
  entry = redis.call('XADD', KEYS[2], '*', 'payload', plan.payload)
  seq = next_seq(KEYS[2], KEYS[8])
end

-- 6. Write the record and the fields scripts check.
local rev = tonumber(cur[1] or '0') + 1
local released = tonumber(cur[5] or '0') + (plan.released_incr or 0)
local fields = {'rev', rev, 'status', status, 'entry', entry, 'released', released, 'plan', plan.plan_id}
if seq then table.insert(fields, 'seq'); table.insert(fields, seq) end
-- The holder's lease goes with its claim; any other status change clears it (a claim that names
-- none then counts with the reaper's lease).
if plan.lease_ms then
  table.insert(fields, 'lease_ms'); table.insert(fields, plan.lease_ms)
elseif status ~= old then
  table.insert(fields, 'lease_ms'); table.insert(fields, '')
end
if ARGV[2] ~= '' then
  table.insert(fields, 'record'); table.insert(fields, ARGV[2])
  table.insert(fields, 'attempt'); table.insert(fields, plan.attempt)
  table.insert(fields, 'cancel'); table.insert(fields, plan.cancel and '1' or '0')
  table.insert(fields, 'model'); table.insert(fields, plan.model)
  if plan.format then table.insert(fields, 'format'); table.insert(fields, plan.format) end
end
if plan.create and plan.project then
  table.insert(fields, 'project'); table.insert(fields, plan.project)
  table.insert(fields, 'cost'); table.insert(fields, tostring(plan.cost or 1))
end
redis.call('HSET', job, unpack(fields))
-- 6b. Fair share (fair.lua): the project's run and wait sets follow the job,
-- a parked job that ends unserved leaves its project's queue, and a parked create may be handed to an
-- empty stream at once (so an idle worker's blocking read wakes on it).
if plan.fair_base and (status ~= old or entry ~= (cur[4] or '')) then
  local project = redis.call('HGET', job, 'project')
  if project then
    fair_follow(plan.fair_base, project, plan.job_id, status, entry)
    if old == 'queued' and status ~= 'queued' then fair_unpark(plan.fair_base, project, plan.job_id) end
  end
end
if park then
  local t = redis.call('TIME')
  fair_park(plan.fair_base, park, plan.job_id, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  fair_top_up(plan.fair_base, KEYS[2], plan.group, plan.job_prefix, plan.model, plan.fair_shares,
              plan.fair_weight, plan.fair_max_running)
end
if status == 'running' then
  redis.call('SADD', KEYS[7], plan.job_id)
elseif old == 'running' then
  redis.call('SREM', KEYS[7], plan.job_id)
end

-- 7. The event, in the model's feed and the job's own stream under the same id.
local event_id = ''
if plan.event then
  local ev = {'job_id', plan.job_id, 'status', status, 'attempt', tostring(plan.attempt),
              'at', plan.at, 'reason', plan.event}
  event_id = redis.call('XADD', KEYS[4], 'MAXLEN', '~', plan.events_maxlen, '*', unpack(ev))
  redis.call('XADD', KEYS[5], event_id, unpack(ev))
end

-- 7b. A progress write's notes ({stage, progress} pairs, in order; a third item is a live preview's
-- JSON) in the job's progress log (what a live viewer replays between events): in the fenced commit, so
-- notes exist exactly when their write was accepted.
if plan.notes then
  for _, note in ipairs(plan.notes) do
    local fields = {'attempt', tostring(plan.attempt), 'stage', note[1], 'progress', note[2], 'at', plan.at}
    if note[3] then
      table.insert(fields, 'preview'); table.insert(fields, note[3])
    end
    redis.call('XADD', KEYS[9], 'MAXLEN', '~', plan.notes_cap, '*', unpack(fields))
  end
  redis.call('PEXPIRE', KEYS[9], plan.record_ttl_ms)
end

-- 8. The dead letter, keeping the error.
if plan.dead then
  local d = {'job_id', plan.job_id, 'model', plan.model, 'reason', plan.dead, 'at', plan.at}
  if plan.dead_code then table.insert(d, 'code'); table.insert(d, plan.dead_code) end
  if plan.dead_message then table.insert(d, 'message'); table.insert(d, plan.dead_message) end
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', plan.events_maxlen, '*', unpack(d))
end

-- 9. Retention: a terminal status has no way out (ALLOWED), so the job and its own events are kept
-- record_ttl_ms from now and then vanish; nothing writes to them afterwards.
if plan.record_ttl_ms and status ~= old and ALLOWED[status] and next(ALLOWED[status]) == nil then
  redis.call('PEXPIRE', job, plan.record_ttl_ms)
  redis.call('PEXPIRE', KEYS[5], plan.record_ttl_ms)
end

return {'ok', entry, event_id}
