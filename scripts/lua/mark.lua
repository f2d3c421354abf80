-- mark: records that orders reached MySQL, for order status polling.
-- KEYS[1] orders hash of one sale; ARGV the order ids.
-- An order the hash does not know is left alone. Returns how many changed.
local n = 0
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and string.sub(v, 1, 1) == 'q' then
    redis.call('HSET', KEYS[1], ARGV[i], 'c' .. string.sub(v, 2))
    n = n + 1
  end
end
return n
