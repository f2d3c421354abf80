-- reserve: applies one or more reservations for one sale, in order, each
-- atomically and exactly as if it were alone. The gateway sends a batch when
-- several buyers of the same sale arrive together; a lone buyer is a batch of 1.
--
-- KEYS[1] meta hash   (stock, sold, limit, starts, ends, locked)
-- KEYS[2] users hash  (user id -> units held)
-- KEYS[3] outbox stream (one entry per accepted order, read by the relay)
-- KEYS[4] orders hash (order id -> "q:QTY:USER" queued, "c:QTY:USER" created)
-- KEYS[5..] the idempotency keys of the reservations that carry one
-- ARGV[1] sale id, ARGV[2] TTL in seconds of an accepted reservation's
-- idempotency key (a refused one keeps none),
-- then four values per reservation: order id (chosen by the gateway before the
-- call, so that a retried call is recognised), user id, quantity, and the index
-- in KEYS of its idempotency key (0 when it has none).
--
-- Returns two values per reservation: an outcome code and the order id.
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'limit', 'starts', 'ends', 'locked')
local exists = m[1] ~= false
local stock = tonumber(m[1]) or 0
local sold = tonumber(m[2]) or 0
local limit = tonumber(m[3]) or 0
local starts = tonumber(m[4]) or 0
local ends = tonumber(m[5]) or 0
local locked = m[6] == '1'
local sale = ARGV[1]
local ttl = tonumber(ARGV[2])
local sold0 = sold
local out = {}

for i = 3, #ARGV, 4 do
  local oid, user, qty, ik = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local record = 'q:' .. qty .. ':' .. user
  local code, rid = nil, oid -- nil: not decided yet

  -- A retried call (the reply of the first was lost): answer as the first did.
  local prev = exists and redis.call('HGET', KEYS[4], oid)
  if prev then
    if string.sub(prev, 2) == string.sub(record, 2) then code = OK else code = ORDER_ID_COLLISION end
  elseif ik > 0 then
    local v = redis.call('GET', KEYS[ik])
    if v then
      local u, q, c, o = string.match(v, '^(.-)\t(%d+)\t(%d+)\t(.*)$')
      if u == user and tonumber(q) == qty then
        code, rid = tonumber(c), o
      else
        code, rid = IDEMPOTENCY_CONFLICT, ''
      end
    end
  end

  if code == nil then
    if not exists then code = NOT_FOUND
    elseif starts > 0 and now < starts then code = NOT_STARTED
    elseif ends > 0 and now >= ends then code = ENDED
    elseif locked then code = LOCKED
    else
      local held = tonumber(redis.call('HGET', KEYS[2], user)) or 0
      if held + qty > limit then code = LIMIT_REACHED
      elseif stock - sold <= 0 then code = SOLD_OUT
      elseif stock - sold < qty then code = INSUFFICIENT_STOCK
      else
        sold = sold + qty
        redis.call('HINCRBY', KEYS[2], user, qty)
        redis.call('XADD', KEYS[3], '*', 'order_id', oid, 'sale_id', sale, 'user_id', user,
          'quantity', qty, 'reserved_at', now)
        redis.call('HSET', KEYS[4], oid, record)
        code = OK
      end
    end
    -- Only an accepted reservation's key is remembered (for ttl, 24 h). A
    -- refusal reserved nothing, so there is nothing a repeat could reserve
    -- twice: a repeat is simply decided again (sold out again, or accepted
    -- once a restock, an unlock or a window opening allows it, and from then
    -- on replayed). Remembering refusals would let any client store a key
    -- per request for 24 h on a sale that refuses everyone, so that Redis
    -- grows with the number of keys sent rather than with the orders taken;
    -- this way a sale holds at most one key per order it accepted.
    if code ~= OK then
      rid = ''
    elseif ik > 0 then
      redis.call('SET', KEYS[ik], user .. '\t' .. qty .. '\t' .. code .. '\t' .. rid, 'EX', ttl)
    end
  end
  out[#out + 1] = code
  out[#out + 1] = rid
end

if sold ~= sold0 then
  redis.call('HSET', KEYS[1], 'sold', sold)
end
return out
