-- repair: gives a held sale (see the hold script) back what MySQL knows and
-- this Redis forgot, atomically with buyers, who are refused while it is held.
--
-- KEYS[1] meta hash, KEYS[2] users hash, KEYS[3] orders hash (order id ->
-- record "F:S:PAYBY:AT:QTY:USER", scripts/record.go), KEYS[4] due sorted set,
-- KEYS[5..] the idempotency keys of the orders below that carry one
-- ARGV[1] the pub/sub channel on which sale changes are announced, ARGV[2]
-- the sale id, ARGV[3] 1 on the last call of a repair (0 before), ARGV[4] the
-- largest seq MySQL holds of the sale, ARGV[5] the idempotency keys' TTL in
-- seconds, then seven values per order, as MySQL has it now: order id,
-- user id, quantity, state letter (C P D X E), pay_by ms (0: none),
-- reserved_at ms, index in KEYS of its idempotency key (0: none).
--
-- The orders given are the ones whose last event MySQL holds is newer than
-- what Redis remembers (their seq is above meta seq): each takes MySQL's
-- state. Its record is written (flagged as in MySQL), and what it counts
-- moves from its old state in Redis (none when Redis forgot the order) to
-- the new: sold and the buyer's units for a live order (pending_payment,
-- paid, confirmed), the due set and pending for one awaiting payment, and
-- the paid, cancelled and expired counters. An idempotency key that Redis
-- forgot gets its first answer back, for what is left of its TTL. Should
-- the units sold pass the stock (a restock lost with the same writes), the
-- stock is raised to them: those units are sold, in MySQL.
--
-- The last call sets meta seq to at least MySQL's, rid to this Redis's
-- id, clears hold and announces the sale. On a sale not held (repaired
-- already, by another consumer) every call changes nothing, so any number
-- of repairers may run at once.
--
-- Returns {held (1 when this call applied), orders changed, stock raised by}.
local live = {C = true, P = true, D = true}
local counters = {P = 'pending', D = 'paid', X = 'cancelled', E = 'expired'}

local applied, sold, counts, changed, raised = 0, 0, {}, 0, 0
local m = redis.call('HMGET', KEYS[1], 'hold', 'stock', 'sold', 'seq')
if m[1] ~= '1' then return {applied, changed, raised} end
applied = 1

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sale, last, maxseq, ttl = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4]), tonumber(ARGV[5])

-- A record, of either form, as a table; nil for a value that is none.
local function parse(v)
  local f, s, pb, at, q, u = string.match(v, '^([qc]):(%u):(%d+):(%d+):(%d+):(.+)$')
  if f then
    return {state = s, payby = tonumber(pb), qty = tonumber(q), user = u}
  end
  f, q, u = string.match(v, '^([qc]):(%d+):(.+)$')
  if f then
    return {state = 'C', payby = 0, qty = tonumber(q), user = u}
  end
  return nil
end

-- count adds (sign 1) or takes away (sign -1) what order oid in state o
-- counts for.
local function count(oid, o, sign)
  if live[o.state] then
    sold = sold + sign * o.qty
    if redis.call('HINCRBY', KEYS[2], o.user, sign * o.qty) <= 0 then
      redis.call('HDEL', KEYS[2], o.user)
    end
  end
  if o.state == 'P' then
    if sign > 0 then redis.call('ZADD', KEYS[4], o.payby, oid) else redis.call('ZREM', KEYS[4], oid) end
  end
  local c = counters[o.state]
  if c then counts[c] = (counts[c] or 0) + sign end
end

for i = 6, #ARGV, 7 do
  local oid, user, qty, st = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local payby, at, ik = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local new = {state = st, payby = payby, qty = qty, user = user}
  local v = redis.call('HGET', KEYS[3], oid)
  local old = v and parse(v)
  if not old or old.state ~= st then
    if old then count(oid, old, -1) end
    count(oid, new, 1)
    changed = changed + 1
  end
  redis.call('HSET', KEYS[3], oid, 'c:' .. st .. ':' .. payby .. ':' .. at .. ':' .. qty .. ':' .. user)
  if ik > 0 then
    local left = ttl - math.floor((now - at) / 1000)
    if left > 0 and redis.call('EXISTS', KEYS[ik]) == 0 then
      -- The reserve script's form: user, quantity, code (0: accepted),
      -- order id and pay_by, tab-separated.
      redis.call('SET', KEYS[ik], user .. '\t' .. qty .. '\t0\t' .. oid .. '\t' .. payby, 'EX', left)
    end
  end
end

local stock = tonumber(m[2]) or 0
local total = (tonumber(m[3]) or 0) + sold
if total > stock then
  raised = total - stock
  redis.call('HSET', KEYS[1], 'stock', total)
end
if sold ~= 0 then redis.call('HSET', KEYS[1], 'sold', total) end
for field, n in pairs(counts) do redis.call('HINCRBY', KEYS[1], field, n) end

if last then
  local seq = tonumber(m[4]) or 0
  if maxseq > seq then seq = maxseq end
  redis.call('HSET', KEYS[1], 'seq', seq, 'rid', string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)'))
  redis.call('HDEL', KEYS[1], 'hold')
  redis.call('PUBLISH', ARGV[1], sale)
end
return {applied, changed, raised}
