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
--   upsert STOCK LIMIT STARTS ENDS WINDOW BUCKETS NAMES ROOM RATE PASS KEY
--                                create or update;
--                                '' keeps a field, 'null' clears a time,
--                                times are Unix ms, WINDOW the payment
--                                window in seconds (0 on create unless
--                                given), BUCKETS the bucket count (1 on
--                                create unless given, fixed after) and
--                                NAMES its buckets' ids, comma-separated
--                                (sale/buckets.go); ROOM the waiting room
--                                (0 off, 1 fifo, 2 random; fixed once the
--                                window has started), RATE its admissions
--                                per second, PASS its pass in seconds, KEY
--                                the sale's ticket key (hex), kept from the
--                                first call that gives the sale a room
--   restock N MAX                add N units to stock (once per KEYS[4]),
--                                unless the stock would pass MAX
--   lock | unlock
--   ping                         answers 'pong' (readiness check of the script path)
--
-- Returns the sale as field name, value pairs (decoded by name in
-- scripts/reply.go, which refuses a reply with a field missing, unknown or
-- given twice): code, created, now, stock, sold, limit, locked, starts,
-- ends, buyers, outbox, window, pending, paid, cancelled, expired,
-- buckets, moved, room, rate, pass, joined, prequeue, version, at, head,
-- integers, and key, a string. outbox is meta outq, the orders and
-- changes of state in the outbox (the reserve script), or the outbox's
-- length for a sale that has no count yet. The waiting room's fields are
-- queue.lua's: prequeue is -1 until a random room's pre-queue is sealed,
-- which a get at or after the start does; version, at and head are the
-- admission clock in effect (queue.lua says how it is read), key the
-- ticket key ('' for a sale that never had a room).
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
local ROOM_FIXED = 24          -- the waiting room changed after the window started

-- The waiting room's defaults (API.md).
local RATE, PASS = 100, 120

local op = ARGV[1]
if op == 'ping' then
  return 'pong'
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exists = redis.call('EXISTS', KEYS[1]) == 1
local created = 0

-- The admission clock in effect: its anchor (at, head) is the one last
-- set, else the window's start (the sale's creation for an open start) with
-- no one admitted (queue.lua).
local function clock(starts, born, qt, qh)
  if qt then return tonumber(qt), tonumber(qh) or 0 end
  if starts > 0 then return starts, 0 end
  return born, 0
end

local function head(at, h, rate)
  if now <= at then return h end
  return h + math.floor((now - at) * rate / 1000)
end

local function view(code)
  local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'limit', 'locked', 'starts', 'ends',
    'window', 'pending', 'paid', 'cancelled', 'expired', 'buckets', 'moved', 'outq',
    'wr', 'aps', 'pass', 'joined', 'preq', 'qv', 'qt', 'qh', 'born', 'wkey')
  local at, h = clock(tonumber(m[5]) or 0, tonumber(m[23]) or 0, m[21], m[22])
  return {'code', code, 'created', created, 'now', now,
    'stock', tonumber(m[1]) or 0, 'sold', tonumber(m[2]) or 0, 'limit', tonumber(m[3]) or 0,
    'locked', tonumber(m[4]) or 0, 'starts', tonumber(m[5]) or 0, 'ends', tonumber(m[6]) or 0,
    'buyers', redis.call('HLEN', KEYS[2]), 'outbox', tonumber(m[14]) or redis.call('XLEN', KEYS[3]),
    'window', tonumber(m[7]) or 0, 'pending', tonumber(m[8]) or 0, 'paid', tonumber(m[9]) or 0,
    'cancelled', tonumber(m[10]) or 0, 'expired', tonumber(m[11]) or 0,
    'buckets', tonumber(m[12]) or 1, 'moved', tonumber(m[13]) or 0,
    'room', tonumber(m[15]) or 0, 'rate', tonumber(m[16]) or RATE, 'pass', tonumber(m[17]) or PASS,
    'joined', tonumber(m[18]) or 0, 'prequeue', tonumber(m[19]) or -1,
    'version', tonumber(m[20]) or 0, 'at', at, 'head', h, 'key', m[24] or ''}
end

if op == 'upsert' then
  local stock, limit, starts, ends, window = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8] or ''
  local buckets, names = ARGV[9] or '', ARGV[10] or ''
  local room, rate, pass, key = ARGV[11] or '', ARGV[12] or '', ARGV[13] or '', ARGV[14] or ''
  if not exists then
    if stock == '' then return view(STOCK_REQUIRED) end
    if limit == '' then limit = '1' end
    if window == '' then window = '0' end
  end
  local m = redis.call('HMGET', KEYS[1], 'sold', 'starts', 'ends', 'buckets', 'moved', 'wr', 'aps', 'qt', 'qh', 'born')
  local sold = tonumber(m[1]) or 0
  local s = tonumber(m[2]) or 0
  local e = tonumber(m[3]) or 0
  if exists and buckets ~= '' and tonumber(buckets) ~= (tonumber(m[4]) or 1) then
    return view(BUCKETS_FIXED)
  end
  -- A room is fixed once the window has started (an open start: at the
  -- sale's creation): the buyers let in so far were let in by it.
  local wr = tonumber(m[6]) or 0
  if exists and room ~= '' and tonumber(room) ~= wr and (s == 0 or now >= s) then
    return view(ROOM_FIXED)
  end
  local below = STOCK_BELOW_SOLD
  -- The units the buckets were handed are at least what they sold.
  if (tonumber(m[4]) or 1) > 1 then sold, below = tonumber(m[5]) or 0, STOCK_BELOW_MOVED end
  if starts == 'null' then s = 0 elseif starts ~= '' then s = tonumber(starts) end
  if ends == 'null' then e = 0 elseif ends ~= '' then e = tonumber(ends) end
  if s > 0 and e > 0 and e <= s then return view(BAD_WINDOW) end
  if stock ~= '' and tonumber(stock) < sold then return view(below) end
  if not exists then
    -- rid: the history of this Redis the sale was created under, so that
    -- it is held only after a restart or a promotion (the hold script).
    -- cseq: the repair marks created again the orders in MySQL with an
    -- event after it (package repair); 0, all of them, for a new sale.
    created = 1
    redis.call('HSET', KEYS[1], 'sold', 0, 'locked', 0, 'born', now, 'cseq', 0,
      'rid', string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)'))
    if buckets ~= '' and tonumber(buckets) > 1 then
      redis.call('HSET', KEYS[1], 'buckets', buckets, 'names', names, 'moved', 0)
    end
  end
  if stock ~= '' then redis.call('HSET', KEYS[1], 'stock', stock) end
  if limit ~= '' then redis.call('HSET', KEYS[1], 'limit', limit) end
  -- A new window applies to the orders accepted after it: each order keeps
  -- the pay_by it was given.
  if window ~= '' then redis.call('HSET', KEYS[1], 'window', window) end
  -- A new rate applies from now: the clock is anchored where the old rate
  -- had it, so that no one admitted is taken back (a sale that has not
  -- started keeps its anchor, the start).
  if rate ~= '' and wr > 0 and tonumber(rate) ~= (tonumber(m[7]) or RATE) then
    local at, h = clock(tonumber(m[2]) or 0, tonumber(m[10]) or now, m[8], m[9])
    if now > at then
      redis.call('HSET', KEYS[1], 'qt', now, 'qh', head(at, h, tonumber(m[7]) or RATE))
    end
  end
  redis.call('HSET', KEYS[1], 'starts', s, 'ends', e)
  if room ~= '' then
    redis.call('HSET', KEYS[1], 'wr', room)
    if room ~= '0' and key ~= '' then redis.call('HSETNX', KEYS[1], 'wkey', key) end
  end
  if rate ~= '' then redis.call('HSET', KEYS[1], 'aps', rate) end
  if pass ~= '' then redis.call('HSET', KEYS[1], 'pass', pass) end
  -- Every change moves the clock's version: the gateways take the newest.
  -- It is the time of the change (or one past the last, whichever is
  -- later), so that a Redis that lost its last writes still moves it past
  -- any clock a gateway may hold.
  redis.call('HSET', KEYS[1], 'qv', math.max((tonumber(redis.call('HGET', KEYS[1], 'qv')) or 0) + 1, now))
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
elseif op == 'get' then
  -- A random room's pre-queue is sealed by the first look at or after the
  -- start (here or a join, queue.lua): the buyers who joined before it.
  local m = redis.call('HMGET', KEYS[1], 'wr', 'preq', 'starts', 'born', 'joined')
  local starts = tonumber(m[3]) or 0
  if m[1] == '2' and not m[2] and now >= (starts > 0 and starts or (tonumber(m[4]) or 0)) then
    redis.call('HSET', KEYS[1], 'preq', tonumber(m[5]) or 0)
  end
else
  return redis.error_reply('ERR admin: unknown operation ' .. tostring(op))
end
if op ~= 'get' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return view(OK)
