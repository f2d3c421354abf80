-- remove: deletes outbox entries whose orders RabbitMQ has confirmed, for
-- the relay; not one of the set Loader loads and swaps, since it can sell
-- nothing and is right whatever state Redis is in (Loader.Remove runs it by
-- its SHA, always the built-in copy, and sends it where a Redis does not
-- know it; a scripts.dir folder need not hold it).
--
-- KEYS[1] outbox stream, KEYS[2] meta hash of the same sale
-- ARGV[1] the relay's consumer group, then pairs: an entry id, and the
-- number of orders (or changes of state) the entry carries.
--
-- Acknowledges every entry in the group and deletes it from the stream,
-- and takes off meta outq (see the reserve script) the orders of those
-- entries it actually deleted, so that an entry removed twice (two relays
-- that both had it confirmed) counts once. A sale whose meta has no outq
-- yet (older than the count) is not given one. Returns the number of
-- entries deleted.
local ids = {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
local gone, orders = 0, 0
for i = 2, #ARGV, 2 do
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    gone = gone + 1
    orders = orders + tonumber(ARGV[i + 1])
  end
end
if orders > 0 and redis.call('HEXISTS', KEYS[2], 'outq') == 1 then
  redis.call('HINCRBY', KEYS[2], 'outq', -orders)
end
return gone
