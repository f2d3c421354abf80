-- reserve: applies one or more reservations for one sale, in order, each
-- atomically and exactly as if it were alone. The gateway sends a batch when
-- several buyers of the same sale arrive together; a lone buyer is a batch of 1.
--
-- KEYS[1] meta hash   (stock, sold, limit, starts, ends, locked, window, pending,
--                      seq, hold, buckets)
-- KEYS[2] users hash  (user id -> units held)
-- KEYS[3] outbox stream (one entry per call that accepted orders, read by the relay)
-- KEYS[4] orders hash (order id -> record "F:S:PAYBY:AT:QTY:USER", scripts/record.go)
-- KEYS[5] due sorted set (order id -> pay_by ms, of orders awaiting payment)
-- KEYS[6..] the idempotency keys of the reservations that carry one
-- ARGV[1] sale id, ARGV[2] TTL in seconds of an accepted reservation's
-- idempotency key (a refused one keeps none), ARGV[3] the reservations, one
-- line each ending in a newline, of four tab-separated fields (no id holds a
-- tab or a newline): order id (chosen by the gateway before the call, so
-- that a retried call is recognised), user id, quantity, and the index in
-- KEYS of its idempotency key (0 when it has none). One packed argument
-- rather than four per reservation: the caller builds one buffer and Redis
-- makes one string of it (scripts/reserve.go).
--
-- On a sale with a payment window (meta window, seconds, > 0) an accepted
-- order is pending_payment until pay_by = now + window: it joins the due set
-- and counts in pending; without one it is confirmed at once (pay_by 0).
--
-- The orders one call accepts go to the outbox as one entry (the batch form
-- of package order, order/stream.go): the fields they share (sale_id,
-- reserved_at, state, pay_by), n, the number of orders, and orders, one line
-- per order of order id, user id, quantity, seq and Idempotency-Key
-- (tab-separated; no id or key holds a tab or a newline). seq is the sale's
-- event number (meta seq counts the orders of this script and the changes of
-- state of the order script); MySQL keeps it and the key, so that a Redis
-- that lost its last writes can be told and repaired (package repair). Meta
-- outq counts the orders and changes of state the outbox holds (the admin
-- view's outbox_pending; the relay takes off an entry's n when it deletes
-- it); a sale from before the count starts it at the outbox's length, every
-- older entry being one. While meta hold is set (the hold script:
-- Redis restarted or failed over since the sale was last checked against
-- MySQL) every reservation answers REPAIRING and nothing changes.
--
-- Returns one string of lines, each ending in a newline: first the units
-- the sale has left after the call, when it is open (-1 when it is not, or
-- the call does not know: a held sale, the home slot of a sale of several
-- buckets), so that a gateway learns a sale is sold out also from a call
-- whose buyers were all at their limit, or that took the last unit; then
-- a line per reservation in the order sent, of three tab-separated
-- fields: an outcome code, the order id (empty for a refusal) and the
-- order's pay_by in Unix ms (0 for none, and for a refusal). One bulk
-- string rather than three values per reservation: the caller reads it
-- without a value of its own per field.
--
-- An Idempotency-Key costs one command: a reservation that would be
-- accepted writes its key with SET NX GET, which finds a first answer
-- (nothing written then: a replay) or writes this one; one that would be
-- refused reads it with GET (a first answer is replayed; a refusal keeps no
-- key).
--
-- Outcome codes: scripts/codes.go holds the same names and values (a test
-- reads this file to keep them so); return no code but by its name.
local OK = 0                   -- accepted
local NOT_FOUND = 1
local NOT_STARTED = 2
local ENDED = 3
local LOCKED = 4
local LIMIT_REACHED = 5
local SOLD_OUT = 6
local INSUFFICIENT_STOCK = 7
local IDEMPOTENCY_CONFLICT = 8
local ORDER_ID_COLLISION = 9   -- never expected; the gateway answers 503
local REPAIRING = 19           -- the sale may be behind MySQL: 503 until repaired
local BUCKETED = 20            -- the sale's stock is in its buckets: ask the buyer's bucket

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'limit', 'starts', 'ends', 'locked', 'window', 'seq', 'hold', 'buckets', 'outq',
  'rid', 'wr', 'qv')
local exists = m[1] ~= false
-- A sale last checked under another history of this Redis (meta rid, see
-- the hold script: a restart or a promotion since) is held here and now,
-- as the hold script would, before anything is decided on what this Redis
-- holds of it.
if exists and m[9] ~= '1' and m[12] ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') then
  redis.call('HSET', KEYS[1], 'hold', 1)
  if m[13] and m[13] ~= '0' then
    redis.call('HSET', KEYS[1], 'qv', math.max((tonumber(m[14]) or 0) + 1, now))
  end
  m[9] = '1'
end
local stock = tonumber(m[1]) or 0
local sold = tonumber(m[2]) or 0
local limit = tonumber(m[3]) or 0
local starts = tonumber(m[4]) or 0
local ends = tonumber(m[5]) or 0
local locked = m[6] == '1'
local window = tonumber(m[7]) or 0
local seq = tonumber(m[8]) or 0
local sale = ARGV[1]
local ttl = tonumber(ARGV[2])
-- The reservations, four values each, as the lines of ARGV[3] give them.
-- A line that does not read so would shift every answer after it: the
-- call is refused whole, before anything is written.
local rsv = {}
local batch, at = ARGV[3], 1
while at <= #batch do
  local _, e, oid, user, qty, ik = string.find(batch, '^([^\t\n]+)\t([^\t\n]+)\t(%d+)\t(%d+)\n', at)
  if not e then
    return redis.error_reply('ERR reserve: reservation ' .. (#rsv / 4 + 1) .. ' unreadable')
  end
  rsv[#rsv + 1] = oid
  rsv[#rsv + 1] = user
  rsv[#rsv + 1] = tonumber(qty)
  rsv[#rsv + 1] = tonumber(ik)
  at = e + 1
end
if #rsv == 0 then
  return redis.error_reply('ERR reserve: no reservation')
end
local sold0 = sold
local pending = 0
local out = {}

-- A held sale reserves nothing; nor does the home slot of a sale of several
-- buckets (the gateway then sends each buyer to the bucket that is theirs).
-- A held sale with no unit left is sold out for certain, whatever Redis
-- lost: MySQL can hold more units sold than Redis, never fewer, and a lost
-- restock is given back only as far as MySQL holds its units sold. So a
-- buyer without an Idempotency-Key hears SOLD_OUT at once, where the sale
-- is open by what Redis holds; one with a key may have been answered
-- before, in writes Redis lost, and waits for the repair.
if m[9] == '1' or (tonumber(m[10]) or 1) > 1 then
  local c = REPAIRING
  if m[9] ~= '1' then c = BUCKETED end
  local gone = c == REPAIRING and stock - sold <= 0 and not (starts > 0 and now < starts)
    and not (ends > 0 and now >= ends) and not locked
  out[1] = '-1\n'
  for i = 1, #rsv, 4 do
    if gone and rsv[i + 3] == 0 then out[#out + 1] = SOLD_OUT .. '\t\t0\n' else out[#out + 1] = c .. '\t\t0\n' end
  end
  return table.concat(out)
end

-- payby of a new order, and its state in the record and in the outbox.
local payby, letter, state = 0, 'C', 'confirmed'
if window > 0 then
  payby, letter, state = now + window * 1000, 'P', 'pending_payment'
end

-- The quantity and user of a record, of either form (the old "F:QTY:USER"
-- has no pay_by), and its pay_by.
local function recorded(v)
  local pb, q, u = string.match(v, '^[qc]:%u:(%d+):%d+:(%d+):(.*)$')
  if pb then return tonumber(q), u, tonumber(pb) end
  q, u = string.match(v, '^[qc]:(%d+):(.*)$')
  return tonumber(q), u, 0
end

-- The records of the batch's order ids, read in one call: a retried call
-- (the reply of the first was lost) finds the records of what the first
-- accepted. The new records, due entries, buyers' units and the outbox
-- entry are written in one call each at the end, so that a reservation
-- costs no redis.call of its own (but the one of its Idempotency-Key, when
-- it has one).
local prevs = {}
if exists then
  local ids = {}
  for i = 1, #rsv, 4 do ids[#ids + 1] = rsv[i] end
  prevs = redis.call('HMGET', KEYS[4], unpack(ids))
end
local recs, dues, seen, lines = {}, {}, {}, {}
-- replayed: an order accepted before is answered again (a retried call, an
-- Idempotency-Key); see the end.
local replayed = false

-- The units the batch's buyers hold, read in one call when the sale is open
-- (a buyer at the limit hears limit_reached before sold_out), and kept here
-- as the batch changes them (a buyer may be in the batch twice); the
-- changed ones are written back in one call at the end.
local held, changed = {}, {}
if exists and not (starts > 0 and now < starts) and not (ends > 0 and now >= ends) and not locked then
  local users = {}
  for i = 2, #rsv, 4 do users[#users + 1] = rsv[i] end
  local hs = redis.call('HMGET', KEYS[2], unpack(users))
  for j, u in ipairs(users) do held[u] = tonumber(hs[j]) or 0 end
end

-- A first answer an Idempotency-Key holds (v, user, quantity, code, order
-- id and, since payment windows, pay_by, tab-separated: no id holds a tab)
-- for a reservation of user and qty: the code, order id and pay_by to
-- answer again, or IDEMPOTENCY_CONFLICT for another buyer's or quantity's.
local function replay(v, user, qty)
  local u, q, c, o = string.match(v, '^(.-)\t(%d+)\t(%d+)\t([^\t]*)')
  if u ~= user or tonumber(q) ~= qty then return IDEMPOTENCY_CONFLICT, '', 0 end
  return tonumber(c), o, tonumber(string.match(v, '^[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t(%d+)$')) or 0
end

for i = 1, #rsv, 4 do
  local oid, user, qty, ik = rsv[i], rsv[i + 1], rsv[i + 2], rsv[i + 3]
  local code, rid, pb = nil, oid, 0 -- code nil: not decided yet

  -- A retried call: answer as the first did, with the order's pay_by,
  -- whatever state the order has reached since. An id twice in one batch
  -- (never sent) is refused, as an id another order holds is.
  local prev = prevs[(i - 1) / 4 + 1] or false
  if seen[oid] then
    code = ORDER_ID_COLLISION
  elseif prev then
    local q, u, p = recorded(prev)
    if q == qty and u == user then code, pb, replayed = OK, p, true else code = ORDER_ID_COLLISION end
  end

  if code == nil then
    local h = held[user] or 0
    if not exists then code = NOT_FOUND
    elseif starts > 0 and now < starts then code = NOT_STARTED
    elseif ends > 0 and now >= ends then code = ENDED
    elseif locked then code = LOCKED
    elseif h + qty > limit then code = LIMIT_REACHED
    elseif stock - sold <= 0 then code = SOLD_OUT
    elseif stock - sold < qty then code = INSUFFICIENT_STOCK
    end
    -- The key's first answer, if any, comes before this decision: read
    -- with the write that remembers an acceptance (SET NX GET writes
    -- nothing when the key holds one), or alone before a refusal. Only an
    -- accepted reservation's key is remembered (for ttl, 24 h). A refusal
    -- reserved nothing, so there is nothing a repeat could reserve twice:
    -- a repeat is simply decided again (sold out again, or accepted once a
    -- restock, an unlock or a window opening allows it, and from then on
    -- replayed). Remembering refusals would let any client store a key per
    -- request for 24 h on a sale that refuses everyone, so that Redis grows
    -- with the number of keys sent rather than with the orders taken; this
    -- way a sale holds at most one key per order it accepted.
    local first = false
    if ik > 0 and code == nil then
      first = redis.call('SET', KEYS[ik], user .. '\t' .. qty .. '\t' .. OK .. '\t' .. oid .. '\t' .. payby,
        'NX', 'GET', 'EX', ttl)
    elseif ik > 0 then
      first = redis.call('GET', KEYS[ik])
    end
    if first then
      code, rid, pb = replay(first, user, qty)
      if code ~= IDEMPOTENCY_CONFLICT then replayed = true end
    elseif code == nil then
      sold = sold + qty
      seq = seq + 1
      held[user] = h + qty
      changed[user] = true
      local idem = ''
      if ik > 0 then idem = string.match(KEYS[ik], '}:idem:(.*)$') end
      lines[#lines + 1] = oid .. '\t' .. user .. '\t' .. qty .. '\t' .. seq .. '\t' .. idem
      recs[#recs + 1] = oid
      recs[#recs + 1] = 'q:' .. letter .. ':' .. payby .. ':' .. now .. ':' .. qty .. ':' .. user
      if payby > 0 then
        dues[#dues + 1] = payby
        dues[#dues + 1] = oid
        pending = pending + 1
      end
      code, pb = OK, payby
    end
    if code ~= OK then rid, pb = '', 0 end
  end
  seen[oid] = true
  out[#out + 1] = code .. '\t' .. rid .. '\t' .. pb .. '\n'
end

if #lines > 0 then
  local hs = {}
  for u in pairs(changed) do
    hs[#hs + 1] = u
    hs[#hs + 1] = held[u]
  end
  redis.call('HSET', KEYS[2], unpack(hs))
  redis.call('XADD', KEYS[3], '*', 'sale_id', sale, 'reserved_at', now, 'state', state, 'pay_by', payby,
    'n', #lines, 'orders', table.concat(lines, '\n'))
end
if #recs > 0 then
  redis.call('HSET', KEYS[4], unpack(recs))
end
if #dues > 0 then
  redis.call('ZADD', KEYS[5], unpack(dues))
end
if sold ~= sold0 then
  local outq = tonumber(m[11]) or redis.call('XLEN', KEYS[3]) - 1 -- less the entry just added
  redis.call('HSET', KEYS[1], 'sold', sold, 'seq', seq, 'outq', outq + #lines)
end
if pending > 0 then
  redis.call('HINCRBY', KEYS[1], 'pending', pending)
end
-- A call that answers an earlier order again and writes nothing else still
-- writes once: WAIT (replicated mode) waits for the replicas to reach the
-- connection's last write, and this write, after the earlier order's, makes
-- the wait cover that order too.
if replayed and sold == sold0 then
  redis.call('HSET', KEYS[1], 'seq', seq)
end
local left = -1
if exists and not (starts > 0 and now < starts) and not (ends > 0 and now >= ends) and not locked then
  left = math.max(stock - sold, 0)
end
return left .. '\n' .. table.concat(out)
