-- mark: records that orders reached MySQL, for order status polling.
-- KEYS[1] orders hash of one sale; ARGV the order ids.
-- An order the hash does not know is left alone. Returns how many changed.
-- Two redis.calls for the whole batch: one read of every record, one write
-- of those that change.
local vs = redis.call('HMGET', KEYS[1], unpack(ARGV))
local out, seen = {}, {}
for i = 1, #ARGV do
  local v = vs[i]
  if v and string.sub(v, 1, 1) == 'q' and not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    out[#out + 1] = ARGV[i]
    out[#out + 1] = 'c' .. string.sub(v, 2)
  end
end
if #out > 0 then
  redis.call('HSET', KEYS[1], unpack(out))
end
return #out / 2
