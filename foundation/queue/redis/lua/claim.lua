-- Deliver the next new entry of the first of some models' streams that has one to a consumer, read
-- its job and, when the job is a plain queued one, start it, in one call. One model on a Cluster
-- (every key of a model's pool shares its hash tag); several only on one server.
-- KEYS[5i-4] model i's job stream   KEYS[5i-3] its delayed zset   KEYS[5i-2] its events stream
-- KEYS[5i-1] its running set   KEYS[5i] its claims hash   (models in the order to try them)
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] the claimer's lease in ms ('': deliver only, never
-- start: Python starts the job with a commit.lua plan)   ARGV[4] events MAXLEN
-- ARGV[5] this call's token ('': none)   ARGV[6] the record format this version reads (records.RECORD_FORMAT)
-- ARGV[7] fair share's per-project (weight, max_running) JSON   ARGV[8] default weight   ARGV[9] default max_running
-- ARGV[3i+7] model i's job hash prefix (keys.job_record_prefix: the job hash is the prefix and the
-- entry's job id; it carries the pool's hash tag, so the hash is in the stream's slot)
-- ARGV[3i+8] model i   ARGV[3i+9] its fair-share prefix (keys.fair_prefix; fair.lua)
--
-- A stream with nothing new for the group gets the next parked job in fair order (fair.lua's top-up),
-- which is then delivered as any entry: entries already in the stream keep going first.
--
-- A re-sent call is safe: each delivery is noted in the claims hash (consumer → token|entry|job id),
-- and a call whose token is the one noted (its first reply was lost: a cut connection, redis-py's
-- retry) answers with that entry and its job again, instead of delivering a second one.
--
-- The start here is redis_plans.start applied by commit.lua, for the one case that needs no Python:
-- the entry's payload is exactly what entries.encode_payload writes, the hash says queued on this
-- entry in a record format this version reads (a newer version's record is never started here: Python
-- leaves it to newer workers), and the record is laid out as pydantic writes a queued GenerationRecord
-- (started_json).
-- The running record is records.started's, on the server's clock. Anything else is delivered for
-- Python to judge and start, as before. A test compares both starts field by field.
--
-- Replies: {'due', i}: model i's delayed retries are due (the caller promotes them, then calls again)
--          | {'none', cursor 1, ..., cursor n}: nothing new in any stream; cursor i: the group's
--            last-delivered id of stream i ('0-0' when it has no group yet), so an XREAD from it
--            wakes on the next new entry
--          | {'started', id, job id, record, rev, released, i}: model i's entry, pending for the
--            consumer, and its job, now running under this claim: the record and the hash's rev
--            and released as this call left them
--          | {'entry', id, {field, value, ...}, record, rev, entry, released, i, format}: the entry of
--            model i, now pending for the consumer, and its job hash's fields (all false when the
--            payload names no job this script can look up: Python reads the payload and dead-letters it)
local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local now_ms = sec * 1000 + math.floor(usec / 1000)
local n = #KEYS / 5
local lease_ms = ARGV[3]
local token = ARGV[5]
local readable = tonumber(ARGV[6])

local function last_delivered(stream)
  if redis.call('EXISTS', stream) == 0 then return '0-0' end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, last = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == ARGV[1] then return last end
  end
  return '0-0'
end

-- records.started(record) as pydantic writes it, or nil when the record is not a plain queued one in
-- that layout. Only the head (up to the progress) and the tail (from the attempt) change; the middle
-- (parameters, input, price, error...) is kept byte for byte. A quote inside a JSON string is always
-- escaped, so the unescaped '","' and '":' the patterns anchor on are the record's own keys. The tail
-- (fixed fields, ~210 bytes) is looked for in the last 320 bytes only: a scan of a long prompt costs.
local function started_json(raw, at)
  local _, head_end = string.find(raw, '^{"id":"[^"\\]*","object":"generation","project":"[^"\\]*",'
    .. '"status":"queued","stage":"queued","progress":0%.0,')
  if not head_end then return nil end
  local tail, _, attempt, max_attempts, created, started = string.find(raw,
    ',"attempt":(%d+),"max_attempts":(%d+),"cancel_requested":false,"created_at":"([^"\\]*)",'
    .. '"started_at":([^,]*),"finished_at":null,"updated_at":"[^"\\]*"}$', math.max(head_end + 1, #raw - 320))
  if not tail then return nil end
  if started == 'null' then started = '"' .. at .. '"' end  -- the first attempt's start stays
  local head = string.gsub(string.sub(raw, 1, head_end), '"status":"queued"', '"status":"running"', 1)
  local new_attempt = tonumber(attempt) + 1
  return head .. string.sub(raw, head_end + 1, tail - 1)
    .. ',"attempt":' .. new_attempt .. ',"max_attempts":' .. max_attempts
    .. ',"cancel_requested":false,"created_at":"' .. created .. '","started_at":' .. started
    .. ',"finished_at":null,"updated_at":"' .. at .. '"}', new_attempt
end

-- commit.lua's start (redis_plans.start): the hash, the running set, the event in the model's feed
-- and the job's own stream. rev + 1; entry and released unchanged; the plan id is this claim's.
local function start(m, id, job_id, job, cur)
  local record, attempt = started_json(cur[1], isotime(sec, usec, true))
  if not record then return nil end
  local rev = tonumber(cur[2]) + 1
  redis.call('HSET', job, 'rev', rev, 'status', 'running', 'plan', 'claim:' .. id .. ':' .. rev,
             'lease_ms', lease_ms, 'record', record, 'attempt', attempt, 'cancel', '0',
             'model', ARGV[3 * m + 8])
  redis.call('SADD', KEYS[5 * m - 1], job_id)
  local project = redis.call('HGET', job, 'project')
  if project then fair_follow(ARGV[3 * m + 9], project, job_id, 'running', id) end
  local ev = {'job_id', job_id, 'status', 'running', 'attempt', tostring(attempt),
              'at', isotime(sec, usec, false), 'reason', 'claimed by ' .. ARGV[2]}
  local event_id = redis.call('XADD', KEYS[5 * m - 2], 'MAXLEN', '~', ARGV[4], '*', unpack(ev))
  redis.call('XADD', job .. ':events', event_id, unpack(ev))
  return {'started', id, job_id, record, rev, cur[4] or '0', m}
end

-- The first reply of this call again: its entry, started (still running on it) or as delivered; nil
-- when the entry is gone meanwhile (then the call claims afresh).
local function again(m, id, job_id)
  local found = redis.call('XRANGE', KEYS[5 * m - 4], id, id)
  if #found == 0 then return nil end
  if job_id == '' then return {'entry', id, found[1][2], false, false, false, false, m, false} end
  local cur = redis.call('HMGET', ARGV[3 * m + 7] .. job_id, 'record', 'rev', 'entry', 'released', 'status', 'format')
  if lease_ms ~= '' and cur[5] == 'running' and cur[3] == id then
    return {'started', id, job_id, cur[1], cur[2], cur[4] or '0', m}
  end
  return {'entry', id, found[1][2], cur[1], cur[2], cur[3], cur[4], m, cur[6]}
end

local function noted(m, reply, id, job_id)
  if token ~= '' then redis.call('HSET', KEYS[5 * m], ARGV[2], token .. '|' .. id .. '|' .. (job_id or '')) end
  return reply
end

if token ~= '' then
  for m = 1, n do
    local last = redis.call('HGET', KEYS[5 * m], ARGV[2])
    local sent, id, job_id = string.match(last or '', '^([^|]*)|([^|]*)|(.*)$')
    if sent == token then
      local reply = again(m, id, job_id)
      if reply then return reply end
    end
  end
end

local shares = nil  -- decoded once, only when a top-up needs it
for m = 1, n do
  local stream, delayed, prefix, model = KEYS[5 * m - 4], KEYS[5 * m - 3], ARGV[3 * m + 7], ARGV[3 * m + 8]
  if redis.call('ZCOUNT', delayed, '-inf', now_ms) > 0 then return {'due', m} end
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', stream, '>')
  if not (reply and #reply > 0 and #reply[1][2] > 0) then
    shares = shares or cjson.decode(ARGV[7])
    if fair_top_up(ARGV[3 * m + 9], stream, ARGV[1], prefix, model, shares, tonumber(ARGV[8]), tonumber(ARGV[9])) then
      reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', stream, '>')
    end
  end
  if reply and #reply > 0 and #reply[1][2] > 0 then
    local id, fields = reply[1][2][1][1], reply[1][2][1][2]
    -- The job id, as entries.read_payload would read it; anything else is left to Python to judge.
    -- The payload encode_payload writes (plain) is matched as text: decoding JSON costs ~20 µs more
    -- in a script run cold, on the wake-up's path. Any other payload is decoded.
    local job_id, plain = nil, false
    if #fields == 2 and fields[1] == 'payload' then
      local written = string.match(fields[2], '^{"v":1,"job_id":"([%w%._:/@%+=%-]+)","model":"')
      if written and #written <= 200 and fields[2] == '{"v":1,"job_id":"' .. written .. '","model":"' .. model .. '"}' then
        job_id, plain = written, true
      else
        local ok, payload = pcall(cjson.decode, fields[2])
        if ok and type(payload) == 'table' and type(payload.job_id) == 'string' and payload.model == model
           and #payload.job_id <= 200 and string.match(payload.job_id, '^[%w%._:/@%+=%-]+$') then
          job_id = payload.job_id
        end
      end
    end
    if not job_id then return noted(m, {'entry', id, fields, false, false, false, false, m, false}, id, nil) end
    local job = prefix .. job_id
    local cur = redis.call('HMGET', job, 'record', 'rev', 'entry', 'released', 'status', 'format')
    -- Started here only on the plain payload (what read_payload accepts as it is), in a format this
    -- version reads (records.record_format: absent or not a number is 1).
    local format = tonumber(cur[6] or '1') or 1
    if lease_ms ~= '' and plain and cur[1] and cur[2] and cur[5] == 'queued' and cur[3] == id
       and format <= readable then
      local started = start(m, id, job_id, job, cur)
      if started then return noted(m, started, id, job_id) end
    end
    return noted(m, {'entry', id, fields, cur[1], cur[2], cur[3], cur[4], m, cur[6]}, id, job_id)
  end
end

local none = {'none'}
for m = 1, n do none[m + 1] = last_delivered(KEYS[5 * m - 4]) end
return none
