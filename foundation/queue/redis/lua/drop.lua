-- Acknowledge and delete one stream entry that starts no job (unreadable, orphaned, or already
-- handled), optionally dead-lettering it with a reason. The consumer keeps claiming afterwards.
-- KEYS[1] job stream   KEYS[2] dead-letter stream
-- ARGV[1] group   ARGV[2] entry id ('' : none, only the dead letter)   ARGV[3] dead-letter MAXLEN
-- ARGV[4..] dead-letter fields (none: no dead letter)
if ARGV[2] ~= '' then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
end
if #ARGV > 3 then
  local fields = {}
  for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
  return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
end
return ''
