-- Remove the consumers of a job stream's group that hold no pending entry and have been idle past a
-- bound: stopped workers (each worker process is a new consumer of every model it hosts). One step,
-- so a consumer that got an entry since it was listed is kept: no pending entry is dropped with it.
-- A live worker that is removed anyway (idle that long without a read) is recreated by its next read.
-- KEYS[1] job stream   KEYS[2] the pool's claims hash (a removed consumer's field goes with it)
-- ARGV[1] group   ARGV[2] minimum idle ms
-- Reply: how many were removed.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local listed = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if type(listed) ~= 'table' or listed.err then return 0 end  -- no such group yet
local removed = 0
for _, c in ipairs(listed) do
  local name, pending, idle = nil, 0, 0
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1] end
    if c[i] == 'pending' then pending = c[i + 1] end
    if c[i] == 'idle' then idle = c[i + 1] end
  end
  if name and pending == 0 and idle >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    redis.call('HDEL', KEYS[2], name)
    removed = removed + 1
  end
end
return removed
