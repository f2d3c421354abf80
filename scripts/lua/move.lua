-- move: units of a sale of several buckets moving between its home slot
-- (the pool: stock not handed to any bucket) and one of its buckets. The two
-- ends are in two slots, so a move is two calls of this script, each atomic
-- on its own slot, and a record between them:
--
--   take   (home)   pool → a move record in the home's moves hash
--   credit (bucket) the units into the bucket's stock, once per move id
--   HDEL   (home)   the record, by the gateway, once credit has answered
--
--   give   (bucket) unsold bucket stock → a move record in its moves hash
--   accept (home)   the units back into the pool, once per move id
--   HDEL   (bucket) the record
--
-- A process that dies between the two halves leaves the record; whoever
-- finds it later (gateway/buckets.go, the settling pass) runs the second half
-- again, which its op key makes a no-op when it had already run. Every unit
-- is at each instant in exactly one of: the pool, an unfinished take (its
-- record in the home, no op key in the bucket yet), a bucket's stock, an
-- unfinished give (its record in the bucket, no op key in the home yet); a
-- record whose op key exists is finished and only waits for its removal.
-- moved (home) counts unfinished takes, bucket stocks and unfinished gives,
-- so the pool is stock − moved and the buckets can never sell more than the
-- sale's stock.
--
-- A fence (home) stops takes for a while: a stock lowered below moved is
-- refused (admin.lua STOCK_BELOW_MOVED) until the buckets have given their
-- unsold units back, which buyers refilling their buckets would take again
-- meanwhile. It only pauses refills, so a fence left by a process that died
-- is harmless, and lapses by itself.
--
-- KEYS[1] meta hash (of the home for take and accept, of the bucket for
-- credit and give), KEYS[2] the moves hash (take, give) or the op key of the
-- move (credit, accept)
-- ARGV[1] the operation, ARGV[2] the move id (of fence and unfence: the
-- fence's), then:
--   take   WANT BUCKET     hand up to max(WANT, a chunk of the stock) units
--   credit N               add N units (a take's) to the bucket's stock
--   give   WANT            give back up to WANT (0: all) unsold units
--   accept N               take N units (a give's) back into the pool
--   fence MS               no take hands out units for MS milliseconds, or
--                          until unfence with the same id (home)
--   unfence                lift the fence of this id, if it is still there
--
-- Returns {code, n}: n the units moved by this call (0 for a repeat).
--
-- Outcome codes: scripts/codes.go holds the same names and values (a test
-- reads this file to keep them so); return no code but by its name.
local OK = 0
local NOT_FOUND = 1
local REPAIRING = 19           -- held: nothing moves until package repair releases it

-- An op key outlives any move record by far: the settling pass finishes a
-- record within seconds of its writer's death.
local OP_TTL = 7 * 86400

local op, id = ARGV[1], ARGV[2]
local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'moved', 'buckets', 'hold', 'fence', 'fenced', 'rid', 'wr', 'qv')
if m[1] == false then return {NOT_FOUND, 0} end
-- A slot last checked under another history of this Redis (meta rid, see
-- the hold script) is held here and now, as the hold script would.
if m[5] ~= '1' and m[8] ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') then
  redis.call('HSET', KEYS[1], 'hold', 1)
  if m[9] and m[9] ~= '0' then
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[1], 'qv', math.max((tonumber(m[10]) or 0) + 1, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
  end
  return {REPAIRING, 0}
end
if m[5] == '1' then return {REPAIRING, 0} end
local stock, sold, moved = tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3]) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if op == 'take' then
  if (tonumber(m[7]) or 0) > now then return {OK, 0} end
  local buckets = tonumber(m[4]) or 1
  -- A chunk of an eighth of a bucket's share: a bucket refills a few times
  -- over a sale, and at its end little stock sits in a bucket nobody buys in.
  local want = math.max(tonumber(ARGV[3]), math.ceil(stock / (8 * buckets)))
  local n = math.min(want, stock - moved)
  if n <= 0 then return {OK, 0} end
  redis.call('HSET', KEYS[1], 'moved', moved + n)
  redis.call('HSET', KEYS[2], id, 'take:' .. ARGV[4] .. ':' .. n .. ':' .. t[1])
  return {OK, n}
elseif op == 'give' then
  local want = tonumber(ARGV[3])
  local n = stock - sold
  if want > 0 and want < n then n = want end
  if n <= 0 then return {OK, 0} end
  redis.call('HSET', KEYS[1], 'stock', stock - n)
  redis.call('HSET', KEYS[2], id, 'give:' .. n .. ':' .. t[1])
  return {OK, n}
elseif op == 'credit' or op == 'accept' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {OK, 0} end
  local n = tonumber(ARGV[3])
  if op == 'credit' then
    redis.call('HSET', KEYS[1], 'stock', stock + n)
  else
    redis.call('HSET', KEYS[1], 'moved', moved - n)
  end
  redis.call('SET', KEYS[2], '1', 'EX', OP_TTL)
  return {OK, n}
elseif op == 'fence' then
  -- One fence at a time: a later one takes its place, and its unfence
  -- lifts it (the earlier's does not).
  redis.call('HSET', KEYS[1], 'fence', id, 'fenced', now + tonumber(ARGV[3]))
  return {OK, 0}
elseif op == 'unfence' then
  if m[6] == id then redis.call('HDEL', KEYS[1], 'fence', 'fenced') end
  return {OK, 0}
end
return redis.error_reply('ERR move: unknown operation ' .. tostring(op))
