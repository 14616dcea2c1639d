-- Deliver the next new entry of one model's stream to a consumer and read its job, in one call: what
-- a claim needs before Python builds the ``running`` record (the start is a commit.lua plan).
-- KEYS[1] job stream   KEYS[2] delayed zset
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] job hash prefix (keys.job_record_prefix: the job hash is
-- the prefix and the entry's job id; it carries the pool's hash tag, so the hash is in this slot)
-- ARGV[4] the stream's model
--
-- Replies: {'due'}: delayed retries are due (the caller promotes them, then calls again)
--          | {'none'}: nothing new in the stream
--          | {'entry', id, {field, value, ...}, record, rev, entry, released}: the entry, now pending
--            for the consumer, and its job hash's fields (all false when the payload names no job
--            this script can look up: Python reads the payload and dead-letters it)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZCOUNT', KEYS[2], '-inf', now_ms) > 0 then return {'due'} end
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[1], '>')
if not reply or #reply == 0 or #reply[1][2] == 0 then return {'none'} end
local id, fields = reply[1][2][1][1], reply[1][2][1][2]

-- The job id, as entries.read_payload would read it; anything else is left to Python to judge.
local job_id = nil
if #fields == 2 and fields[1] == 'payload' then
  local ok, payload = pcall(cjson.decode, fields[2])
  if ok and type(payload) == 'table' and type(payload.job_id) == 'string' and payload.model == ARGV[4]
     and #payload.job_id <= 200 and string.match(payload.job_id, '^[%w%._:/@%+=%-]+$') then
    job_id = payload.job_id
  end
end
if not job_id then return {'entry', id, fields, false, false, false, false} end
local cur = redis.call('HMGET', ARGV[3] .. job_id, 'record', 'rev', 'entry', 'released')
return {'entry', id, fields, cur[1], cur[2], cur[3], cur[4]}
