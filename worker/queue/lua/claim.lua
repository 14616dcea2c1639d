-- Deliver the next new entry of the first of some models' streams that has one to a consumer, and
-- read its job, in one call: what a claim needs before Python builds the ``running`` record (the start
-- is a commit.lua plan). One model on a Cluster (every key of a model's pool shares its hash tag);
-- several only on one server.
-- KEYS[2i-1] model i's job stream   KEYS[2i] its delayed zset   (models in the order to try them)
-- ARGV[1] group   ARGV[2] consumer
-- ARGV[2i+1] model i's job hash prefix (keys.job_record_prefix: the job hash is the prefix and the
-- entry's job id; it carries the pool's hash tag, so the hash is in the stream's slot)
-- ARGV[2i+2] model i
--
-- Replies: {'due', i}: model i's delayed retries are due (the caller promotes them, then calls again)
--          | {'none', cursor 1, ..., cursor n}: nothing new in any stream; cursor i: the group's
--            last-delivered id of stream i ('0-0' when it has no group yet), so an XREAD from the
--            cursors wakes on the next new entry
--          | {'entry', id, {field, value, ...}, record, rev, entry, released, i}: the entry of model
--            i, now pending for the consumer, and its job hash's fields (all false when the payload
--            names no job this script can look up: Python reads the payload and dead-letters it)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS / 2

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

for m = 1, n do
  local stream, delayed, prefix, model = KEYS[2 * m - 1], KEYS[2 * m], ARGV[2 * m + 1], ARGV[2 * m + 2]
  if redis.call('ZCOUNT', delayed, '-inf', now_ms) > 0 then return {'due', m} end
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', stream, '>')
  if reply and #reply > 0 and #reply[1][2] > 0 then
    local id, fields = reply[1][2][1][1], reply[1][2][1][2]
    -- The job id, as entries.read_payload would read it; anything else is left to Python to judge.
    local job_id = nil
    if #fields == 2 and fields[1] == 'payload' then
      local ok, payload = pcall(cjson.decode, fields[2])
      if ok and type(payload) == 'table' and type(payload.job_id) == 'string' and payload.model == model
         and #payload.job_id <= 200 and string.match(payload.job_id, '^[%w%._:/@%+=%-]+$') then
        job_id = payload.job_id
      end
    end
    if not job_id then return {'entry', id, fields, false, false, false, false, m} end
    local cur = redis.call('HMGET', prefix .. job_id, 'record', 'rev', 'entry', 'released')
    return {'entry', id, fields, cur[1], cur[2], cur[3], cur[4], m}
  end
end

local none = {'none'}
for m = 1, n do none[m + 1] = last_delivered(KEYS[2 * m - 1]) end
return none
