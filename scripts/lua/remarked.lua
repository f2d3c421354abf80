-- remarked: records, for package repair, that the orders MySQL holds of a
-- sale with an event up to ARGV[1] have been marked created in this Redis
-- since it last lost writes (meta cseq); not one of the set Loader loads
-- and swaps, since it sells nothing and is right whatever state Redis is in
-- (Loader.Remarked runs the built-in copy, as Loader.Remove does).
--
-- KEYS[1] meta hash of the sale (or bucket)
-- ARGV[1] the seq up to which the repairer marked the orders again.
--
-- The marks were sent after the sale was released under this Redis's
-- history: the call changes nothing unless that is still the history the
-- sale was last checked under (meta rid, not held), so that a restart
-- between the marks and this call, which may have lost the marks, leaves
-- cseq where it was and the next repair marks them again. cseq only grows.
-- Returns 1 when it moved cseq, else 0.
local moved = 0
local m = redis.call('HMGET', KEYS[1], 'rid', 'hold', 'cseq')
if m[1] and m[2] ~= '1' and m[1] == string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
    and (tonumber(m[3]) or 0) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'cseq', ARGV[1])
  moved = 1
end
return moved
