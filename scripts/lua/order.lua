-- order: the life of an order after its reservation, as one atomic call on
-- the sale's keys, so that a pay, a cancel and an expiry of the same order
-- are decided one after the other and never both (Invariant 8).
--
-- KEYS[1] meta hash, KEYS[2] users hash, KEYS[3] outbox stream,
-- KEYS[4] orders hash (order id -> record "F:S:PAYBY:AT:QTY:USER", scripts/record.go),
-- KEYS[5] due sorted set (order id -> pay_by ms, of orders awaiting payment),
-- KEYS[6] created set (the order ids in MySQL, added by the consumers; pay,
-- cancel and get only, a sweep needs none)
-- ARGV[1] the operation, ARGV[2] the pub/sub channel on which a sale that
-- was sold out and has units again is announced (gateways forget that they
-- remembered it sold out), ARGV[3] the sale id, then the operation's own:
--   pay ORDER      pending_payment -> paid; again on a paid order: the same
--   cancel ORDER   pending_payment or confirmed -> cancelled, units back;
--                  again on a cancelled order: the same
--   get ORDER      read the order
--   sweep MAX      expire up to MAX orders whose pay_by has come, units back
--
-- A pay or a cancel of a pending order at or after its pay_by (Redis TIME)
-- expires it there and then and answers ORDER_EXPIRED, whether or not a
-- sweep has run: that is where pay-versus-expiry is decided. Every change of
-- state writes the order's new record, moves the sale's counters (sold; and
-- pending, paid, cancelled, expired: numbers of orders), returns the units of
-- a cancelled or expired order to the stock and to the buyer's allowance
-- (HDEL at 0), and adds the order in its new state to the outbox, with the
-- fields of the reserve script's entry: order_id, sale_id, user_id, quantity,
-- reserved_at (the time of the change for a record of the old form, which
-- has none), state, pay_by (0 for none) and seq, the sale's next event
-- number (meta seq; see the reserve script). Each counts once in meta outq.
--
-- While meta hold is set (the sale may be behind MySQL after a Redis
-- rollback; package repair clears it) pay, cancel and get answer REPAIRING
-- and a sweep expires nothing and asks to be called again in a second.
--
-- pay, cancel and get return {code, record, now, changed}: record is the
-- order's record as the call left it ('' for ORDER_NOT_FOUND), flagged 'c'
-- (in MySQL) when it is so or its id is in the created set, and changed is
-- 1 when the call changed the order (also when it expired it). sweep returns
-- {now, next, id1, payby1, id2, payby2, ...}: the orders it expired with
-- their pay_by, and next, the pay_by of the earliest order still awaiting
-- payment (0: none).
--
-- Outcome codes: scripts/codes.go holds the same names and values (a test
-- reads this file to keep them so); return no code but by its name.
local OK = 0
local ORDER_NOT_FOUND = 14
local ORDER_PAID = 15
local ORDER_CANCELLED = 16
local ORDER_EXPIRED = 17
local ORDER_CONFIRMED = 18     -- a pay of an order whose sale asked none
local REPAIRING = 19           -- the sale may be behind MySQL: 503 until repaired

local op, channel, sale = ARGV[1], ARGV[2], ARGV[3]
local mh = redis.call('HMGET', KEYS[1], 'hold', 'seq', 'outq', 'rid', 'stock', 'wr', 'qv')
-- TIME as late as it can be: the outbox entry's stream id (Redis's clock
-- at the XADD) should fall in the millisecond the decision was made in.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A sale last checked under another history of this Redis (meta rid, see
-- the hold script) is held here and now, as the hold script would.
if mh[5] and mh[1] ~= '1' and mh[4] ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') then
  redis.call('HSET', KEYS[1], 'hold', 1)
  if mh[6] and mh[6] ~= '0' then
    redis.call('HSET', KEYS[1], 'qv', math.max((tonumber(mh[7]) or 0) + 1, now))
  end
  mh[1] = '1'
end
if mh[1] == '1' then
  if op == 'sweep' then return {now, now + 1000} end
  return {REPAIRING, '', now, 0}
end
local seq, seq0 = tonumber(mh[2]) or 0, tonumber(mh[2]) or 0

local stateNames = {C = 'confirmed', P = 'pending_payment', D = 'paid', X = 'cancelled', E = 'expired'}
local counters = {D = 'paid', X = 'cancelled', E = 'expired'}

-- A record, of either form, as a table; nil for a value that is none.
local function parse(v)
  local f, s, pb, at, q, u = string.match(v, '^([qc]):(%u):(%d+):(%d+):(%d+):(.+)$')
  if f and stateNames[s] then
    return {flag = f, state = s, payby = tonumber(pb), at = tonumber(at), qty = tonumber(q), user = u}
  end
  f, q, u = string.match(v, '^([qc]):(%d+):(.+)$')
  if f then
    return {flag = f, state = 'C', payby = 0, at = 0, qty = tonumber(q), user = u}
  end
  return nil
end

local function encode(o)
  return o.flag .. ':' .. o.state .. ':' .. o.payby .. ':' .. o.at .. ':' .. o.qty .. ':' .. o.user
end

-- What the changes of this call add up to, applied once by flush.
local returned, pendingDelta, counts = 0, 0, {}

-- finish moves order oid (record o) to state `to` (D, X or E).
local function finish(oid, o, to)
  if to ~= 'D' then
    if redis.call('HINCRBY', KEYS[2], o.user, -o.qty) <= 0 then
      redis.call('HDEL', KEYS[2], o.user)
    end
    returned = returned + o.qty
  end
  if o.state == 'P' then
    pendingDelta = pendingDelta - 1
    redis.call('ZREM', KEYS[5], oid)
  end
  counts[counters[to]] = (counts[counters[to]] or 0) + 1
  o.state = to
  redis.call('HSET', KEYS[4], oid, encode(o))
  local at = o.at
  if at == 0 then at = now end
  seq = seq + 1
  redis.call('XADD', KEYS[3], '*', 'order_id', oid, 'sale_id', sale, 'user_id', o.user,
    'quantity', o.qty, 'reserved_at', at, 'state', stateNames[to], 'pay_by', o.payby, 'seq', seq)
end

local function flush()
  if returned > 0 then
    local m = redis.call('HMGET', KEYS[1], 'stock', 'sold')
    local soldOut = (tonumber(m[1]) or 0) - (tonumber(m[2]) or 0) <= 0
    redis.call('HINCRBY', KEYS[1], 'sold', -returned)
    if soldOut then redis.call('PUBLISH', channel, sale) end
  end
  if pendingDelta ~= 0 then redis.call('HINCRBY', KEYS[1], 'pending', pendingDelta) end
  if seq ~= seq0 then
    -- outq: see the reserve script; a sale from before it starts at the
    -- outbox's length, the entries just added included.
    local outq = redis.call('XLEN', KEYS[3])
    if mh[3] then outq = tonumber(mh[3]) + seq - seq0 end
    redis.call('HSET', KEYS[1], 'seq', seq, 'outq', outq)
  end
  for field, n in pairs(counts) do redis.call('HINCRBY', KEYS[1], field, n) end
end

if op == 'sweep' then
  local out = {now, 0}
  local ids = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
  for _, oid in ipairs(ids) do
    local v = redis.call('HGET', KEYS[4], oid)
    local o = v and parse(v)
    if o and o.state == 'P' then
      if now >= o.payby then
        finish(oid, o, 'E')
        out[#out + 1] = oid
        out[#out + 1] = o.payby
      else
        redis.call('ZADD', KEYS[5], o.payby, oid) -- due by its record, not its score
      end
    else
      -- Not awaiting payment (paid, cancelled, expired, gone or unreadable):
      -- nothing is due of it.
      redis.call('ZREM', KEYS[5], oid)
    end
  end
  flush()
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if first[2] then out[2] = tonumber(first[2]) end
  return out
end

if op ~= 'pay' and op ~= 'cancel' and op ~= 'get' then
  return redis.error_reply('ERR order: unknown operation ' .. tostring(op))
end

local oid = ARGV[4]
local v = redis.call('HGET', KEYS[4], oid)
if not v then return {ORDER_NOT_FOUND, '', now, 0} end
local o = parse(v)
if not o then return redis.error_reply('ERR order: unreadable record of ' .. oid) end
-- The consumers mark an order in MySQL by adding its id to the created set;
-- a record flagged 'c' (an older release's mark, or the repair's) is so
-- already. A change below writes the flag it read, which is true either way.
if o.flag == 'q' and KEYS[6] and redis.call('SISMEMBER', KEYS[6], oid) == 1 then o.flag = 'c' end

local code, changed = OK, 0
if op == 'get' then
  -- A read changes nothing; the gateway reads a due order as expired.
elseif o.state == 'P' and now >= o.payby then
  finish(oid, o, 'E')
  code, changed = ORDER_EXPIRED, 1
elseif op == 'pay' then
  if o.state == 'P' then
    finish(oid, o, 'D')
    changed = 1
  elseif o.state == 'X' then code = ORDER_CANCELLED
  elseif o.state == 'E' then code = ORDER_EXPIRED
  elseif o.state == 'C' then code = ORDER_CONFIRMED
  end -- paid already: the same answer
else
  if o.state == 'P' or o.state == 'C' then
    finish(oid, o, 'X')
    changed = 1
  elseif o.state == 'D' then code = ORDER_PAID
  elseif o.state == 'E' then code = ORDER_EXPIRED
  end -- cancelled already: the same answer
end
flush()
-- A pay or cancel answered OK without a change (paid or cancelled before)
-- still writes once, after that change: WAIT (replicated mode) then covers
-- it (see the reserve script's end).
if op ~= 'get' and code == OK and changed == 0 then
  redis.call('HSET', KEYS[1], 'seq', seq)
end
return {code, encode(o), now, changed}
