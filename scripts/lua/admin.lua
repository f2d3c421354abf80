-- admin: every operator action on a sale, as one atomic call on the sale's
-- keys, so that it serialises with buyers and takes effect between two of them.
--
-- KEYS[1] meta hash, KEYS[2] users hash, KEYS[3] outbox stream,
-- KEYS[4] (restock only) a key naming this restock, so that a call retried
-- after a lost reply adds the units once
-- ARGV[1] the operation, ARGV[2] the pub/sub channel on which a change is
-- announced (gateways forget what they cached of the sale), ARGV[3] the sale
-- id, then the operation's own arguments:
--   get                          read the sale
--   upsert STOCK LIMIT STARTS ENDS WINDOW BUCKETS NAMES   create or update;
--                                '' keeps a field, 'null' clears a time,
--                                times are Unix ms, WINDOW the payment
--                                window in seconds (0 on create unless
--                                given), BUCKETS the bucket count (1 on
--                                create unless given, fixed after) and
--                                NAMES its buckets' ids, comma-separated
--                                (gateway/buckets.go)
--   restock N MAX                add N units to stock (once per KEYS[4]),
--                                unless the stock would pass MAX
--   lock | unlock
--   ping                         answers 'pong' (readiness check of the script path)
--
-- Returns {code, created, now, stock, sold, limit, locked, starts, ends, buyers,
-- outbox, window, pending, paid, cancelled, expired, buckets, moved}; outbox
-- is meta outq, the orders and changes of state in the outbox (the reserve
-- script), or the outbox's length for a sale that has no count yet.
--
-- A sale of several buckets keeps here, in its home slot, the whole stock
-- and its settings, and moved: the units handed to its buckets and not
-- given back (the move script). Its sold, buyers and orders are the
-- buckets' (each bucket is a sale of this script too, whose stock is what it
-- was handed); so a stock may not go below moved, which is at least what
-- the buckets sold. Such a stock is STOCK_BELOW_MOVED, not STOCK_BELOW_SOLD:
-- the buckets may hold units unsold, which the gateway takes back into the
-- pool before it asks again (gateway/buckets_lower.go).
--
-- Outcome codes: scripts/codes.go holds the same names and values (a test
-- reads this file to keep them so); return no code but by its name.
local OK = 0
local NOT_FOUND = 1
local STOCK_BELOW_SOLD = 10
local BAD_WINDOW = 11          -- ends not after starts
local STOCK_REQUIRED = 12      -- stock missing on create
local STOCK_CEILING = 13       -- a restock would take stock above the ceiling
local BUCKETS_FIXED = 21       -- an update names another bucket count
local STOCK_BELOW_MOVED = 22   -- a home's stock below what its buckets were handed

local op = ARGV[1]
if op == 'ping' then
  return 'pong'
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exists = redis.call('EXISTS', KEYS[1]) == 1
local created = 0

local function view(code)
  local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'limit', 'locked', 'starts', 'ends',
    'window', 'pending', 'paid', 'cancelled', 'expired', 'buckets', 'moved', 'outq')
  return {code, created, now, tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3]) or 0,
    tonumber(m[4]) or 0, tonumber(m[5]) or 0, tonumber(m[6]) or 0,
    redis.call('HLEN', KEYS[2]), tonumber(m[14]) or redis.call('XLEN', KEYS[3]),
    tonumber(m[7]) or 0, tonumber(m[8]) or 0, tonumber(m[9]) or 0, tonumber(m[10]) or 0,
    tonumber(m[11]) or 0, tonumber(m[12]) or 1, tonumber(m[13]) or 0}
end

if op == 'upsert' then
  local stock, limit, starts, ends, window = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8] or ''
  local buckets, names = ARGV[9] or '', ARGV[10] or ''
  if not exists then
    if stock == '' then return view(STOCK_REQUIRED) end
    if limit == '' then limit = '1' end
    if window == '' then window = '0' end
  end
  local m = redis.call('HMGET', KEYS[1], 'sold', 'starts', 'ends', 'buckets', 'moved')
  local sold = tonumber(m[1]) or 0
  local s = tonumber(m[2]) or 0
  local e = tonumber(m[3]) or 0
  if exists and buckets ~= '' and tonumber(buckets) ~= (tonumber(m[4]) or 1) then
    return view(BUCKETS_FIXED)
  end
  local below = STOCK_BELOW_SOLD
  -- The units the buckets were handed are at least what they sold.
  if (tonumber(m[4]) or 1) > 1 then sold, below = tonumber(m[5]) or 0, STOCK_BELOW_MOVED end
  if starts == 'null' then s = 0 elseif starts ~= '' then s = tonumber(starts) end
  if ends == 'null' then e = 0 elseif ends ~= '' then e = tonumber(ends) end
  if s > 0 and e > 0 and e <= s then return view(BAD_WINDOW) end
  if stock ~= '' and tonumber(stock) < sold then return view(below) end
  if not exists then
    -- run: the Redis process this sale was created under, so that the hold
    -- script holds it only after a restart or failover (a new run id).
    created = 1
    redis.call('HSET', KEYS[1], 'sold', 0, 'locked', 0,
      'run', string.match(redis.call('INFO', 'server'), 'run_id:(%x+)'))
    if buckets ~= '' and tonumber(buckets) > 1 then
      redis.call('HSET', KEYS[1], 'buckets', buckets, 'names', names, 'moved', 0)
    end
  end
  if stock ~= '' then redis.call('HSET', KEYS[1], 'stock', stock) end
  if limit ~= '' then redis.call('HSET', KEYS[1], 'limit', limit) end
  -- A new window applies to the orders accepted after it: each order keeps
  -- the pay_by it was given.
  if window ~= '' then redis.call('HSET', KEYS[1], 'window', window) end
  redis.call('HSET', KEYS[1], 'starts', s, 'ends', e)
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return view(OK)
end

if not exists then return view(NOT_FOUND) end

if op == 'restock' then
  -- A retried call (its first reply lost) finds its key and answers as the
  -- first did, before the ceiling is looked at: the units it added may be
  -- what now leaves no room under the ceiling. A refused restock sets no
  -- key, so nothing at all changes.
  if redis.call('EXISTS', KEYS[4]) == 0 then
    local n, ceiling = tonumber(ARGV[4]), tonumber(ARGV[5])
    local stock = tonumber(redis.call('HGET', KEYS[1], 'stock')) or 0
    if stock + n > ceiling then return view(STOCK_CEILING) end
    redis.call('SET', KEYS[4], '1', 'EX', 3600)
    redis.call('HINCRBY', KEYS[1], 'stock', n)
  end
elseif op == 'lock' then
  redis.call('HSET', KEYS[1], 'locked', 1)
elseif op == 'unlock' then
  redis.call('HSET', KEYS[1], 'locked', 0)
elseif op ~= 'get' then
  return redis.error_reply('ERR admin: unknown operation ' .. tostring(op))
end
if op ~= 'get' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return view(OK)
