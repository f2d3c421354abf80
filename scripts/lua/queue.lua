-- queue: buyers join a sale's waiting room, in one atomic call on the
-- sale's slot (its home, for a sale of several buckets), in the order
-- given. A buyer has one place per sale: joining again finds it, also
-- when the same buyer is named twice in one call.
--
-- KEYS[1] meta hash (wr, aps, pass, joined, preq, qv, qt, qh, born, wkey,
--                    and the sale's stock, sold, starts, ends, buckets)
-- KEYS[2] queue hash (user id -> join number)
-- ARGV[1..n] user ids, n >= 1 (a batch of the gateway's joins)
--
-- A join number j counts the sale's joins from 1 (meta joined). In a fifo
-- room j is the buyer's position. In a random room the buyers who joined
-- before the start, the pre-queue, are ordered at the start by a keyed
-- permutation of their join numbers (sale/shuffle.go), which needs their
-- count: meta preq, sealed by the first join (or admin get) at or after the
-- start. A later joiner's position is its join number, behind them.
--
-- The admission clock: position p is admitted once
--   head(now) = qh + floor((now - qt) * aps / 1000) >= p,
-- anchored at (qt, qh), or at (the start, 0) until an anchor is set: the
-- admin script sets one when the rate changes (the head so far is kept),
-- and a join sets one when it finds the head past every place given, the
-- room empty (in a call, only its first new joiner can): the time no one
-- waited is not credit that would let a crowd in at once, so the newcomer
-- is next, 1/aps from now. meta qv, the
-- clock's version, moves with every anchor, to the time of the change or
-- one past the last, so that it moves on past what a gateway holds also
-- after Redis lost its last writes; a gateway takes the newest clock it
-- holds (its memory's, or the one a ticket carries).
--
-- Returns {code, joined, preq, qv, qt, qh, aps, pass, wr, starts, ends,
-- now, key, j1, ..., jn}: the room after every join of the call, then
-- each buyer's join number in ARGV's order; preq is -1 until sealed. A
-- refusal is the whole call's (every outcome is the sale's) and has no j.
--
-- Outcome codes: scripts/codes.go holds the same names and values (a test
-- reads this file to keep them so); return no code but by its name.
local OK = 0
local NOT_FOUND = 1
local ENDED = 3
local SOLD_OUT = 6
local NO_ROOM = 23             -- the sale has no waiting room

local RATE, PASS = 100, 120

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'starts', 'ends', 'buckets',
  'wr', 'aps', 'pass', 'joined', 'preq', 'qv', 'qt', 'qh', 'born', 'wkey', 'rid', 'hold')
-- A sale last checked under another history of this Redis (meta rid, see
-- the hold script) is held here and now, as the hold script would: its
-- clock's version moves past any a gateway may hold. Joins go on.
if m[1] and m[17] ~= '1' and m[16] ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') then
  redis.call('HSET', KEYS[1], 'hold', 1)
  if m[6] and m[6] ~= '0' then
    m[11] = math.max((tonumber(m[11]) or 0) + 1, now)
    redis.call('HSET', KEYS[1], 'qv', m[11])
  end
end
local wr = tonumber(m[6]) or 0
local starts, ends = tonumber(m[3]) or 0, tonumber(m[4]) or 0
local rate, pass = tonumber(m[7]) or RATE, tonumber(m[8]) or PASS
local joined = tonumber(m[9]) or 0
local preq = tonumber(m[10]) or -1
local qv = tonumber(m[11]) or 0
local start = starts > 0 and starts or (tonumber(m[14]) or 0)
local at, h = start, 0
if m[12] then at, h = tonumber(m[12]), tonumber(m[13]) or 0 end

local function reply(code, js)
  local r = {code, joined, preq, qv, at, h, rate, pass, wr, starts, ends, now, m[15] or ''}
  for i = 1, #js do r[13 + i] = js[i] end
  return r
end

if not m[1] then return reply(NOT_FOUND, {}) end
if wr == 0 then return reply(NO_ROOM, {}) end
if ends > 0 and now >= ends then return reply(ENDED, {}) end
-- A sale of several buckets keeps its units in them: what is left is told
-- by the buys, not here.
if (tonumber(m[5]) or 1) <= 1 and (tonumber(m[1]) or 0) - (tonumber(m[2]) or 0) <= 0 then
  return reply(SOLD_OUT, {})
end

local started = now >= start
if wr == 2 and preq < 0 and started then
  preq = joined
  redis.call('HSET', KEYS[1], 'preq', preq)
end

local had = redis.call('HMGET', KEYS[2], unpack(ARGV))
local js, places, given = {}, {}, {}
local anchored = false
for i = 1, #ARGV do
  local u = ARGV[i]
  local j = tonumber(had[i]) or given[u]
  if not j then
    joined = joined + 1
    j = joined
    given[u] = j
    places[#places + 1] = u
    places[#places + 1] = j
    if started then
      local head = h
      if now > at then head = h + math.floor((now - at) * rate / 1000) end
      if head >= j then at, h, anchored = now, j - 1, true end
    end
  end
  js[i] = j
end
if #places > 0 then
  redis.call('HSET', KEYS[2], unpack(places))
  redis.call('HSET', KEYS[1], 'joined', joined)
end
if anchored then
  qv = math.max(qv + 1, now)
  redis.call('HSET', KEYS[1], 'qt', at, 'qh', h, 'qv', qv)
end
return reply(OK, js)
