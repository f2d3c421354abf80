-- hold: before the scripts are loaded into Redis, tells whether a sale may
-- be behind MySQL and, if so, holds it until package repair has checked it.
--
-- KEYS[1] the sale's meta hash.
--
-- meta rid is the replication id (INFO replication, master_replid) of the
-- Redis under which the sale was created or last repaired: the name of
-- that Redis's history of writes. A restart gives Redis a new one (with
-- AOF, also after a clean shutdown) and so does a promotion (a replica
-- shares its primary's id until it is promoted, then takes a new one):
-- this Redis may then hold the sale without its last writes (appendfsync
-- everysec loses up to a second on a machine crash; an asynchronous
-- replica lags its primary), while the orders of those writes may be in
-- MySQL already. Such a sale gets meta hold = 1: the reserve and order
-- scripts then refuse it (REPAIRING, 503) until the repair script clears
-- it. A sale already held stays held; one whose rid is this Redis's is
-- left alone (a SCRIPT FLUSH is no rollback). The reserve, order, queue
-- and move scripts make the same check on the sale they touch, so that a
-- sale is held before anything is decided on it, whether or not a pass has
-- run since the restart or promotion (a promoted replica may hold the
-- scripts already, and answer no NOSCRIPT).
--
-- A sale with a waiting room also has its admission clock's version moved
-- to now (queue.lua): a change of the clock that this Redis lost may still
-- be in a gateway's memory with a later version than the one kept, and the
-- gateways take the newest; now is past every version given before.
--
-- Returns {held (0 or 1), this Redis's replication id}; {0, that id} for a
-- key that holds no sale.
local rid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
local m = redis.call('HMGET', KEYS[1], 'rid', 'hold', 'stock', 'wr', 'qv')
local held = 0
if m[3] then
  if m[2] == '1' then
    held = 1
  elseif m[1] ~= rid then
    redis.call('HSET', KEYS[1], 'hold', 1)
    held = 1
    if m[4] and m[4] ~= '0' then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      redis.call('HSET', KEYS[1], 'qv', math.max((tonumber(m[5]) or 0) + 1, now))
    end
  end
end
return {held, rid}
