-- hold: before the scripts are loaded into Redis, tells whether a sale may
-- be behind MySQL and, if so, holds it until package repair has checked it.
--
-- KEYS[1] the sale's meta hash.
--
-- meta run is the run id of the Redis process under which the sale was
-- created or last repaired. A different run id means this Redis has
-- restarted or failed over since then, and may have come back without its
-- last writes (appendfsync everysec loses up to a second on a machine
-- crash; an asynchronous replica lags its primary), while the orders of
-- those writes may be in MySQL already. Such a sale gets meta hold = 1:
-- the reserve and order scripts then refuse it (REPAIRING, 503) until the
-- repair script clears it. A sale already held stays held; one whose run id
-- is this process's is left alone (a SCRIPT FLUSH is no rollback).
--
-- A sale with a waiting room also has its admission clock's version moved
-- to now (queue.lua): a change of the clock that this Redis lost may still
-- be in a gateway's memory with a later version than the one kept, and the
-- gateways take the newest; now is past every version given before.
--
-- Returns {held (0 or 1), the current run id}; {0, run id} for a key that
-- holds no sale.
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local m = redis.call('HMGET', KEYS[1], 'run', 'hold', 'stock', 'wr', 'qv')
local held = 0
if m[3] then
  if m[2] == '1' then
    held = 1
  elseif m[1] ~= run then
    redis.call('HSET', KEYS[1], 'hold', 1)
    held = 1
    if m[4] and m[4] ~= '0' then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      redis.call('HSET', KEYS[1], 'qv', math.max((tonumber(m[5]) or 0) + 1, now))
    end
  end
end
return {held, run}
