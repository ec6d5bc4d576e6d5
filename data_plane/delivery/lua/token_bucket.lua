-- Token buckets of throttle keys, shared by every replica (data_plane/delivery/throttle.py): one
-- call checks and takes the tokens of a pull's candidate messages, atomically.
-- KEYS: one hash per throttle key ({t = tokens, at = ms of the last refill}), hash-tagged by
--   environment.
-- ARGV: rate and burst of each key, in KEYS order (2 × #KEYS values); then per candidate message,
--   in delivery order: its group (a fairness key), how many throttle keys it has, and their
--   indexes in KEYS (1-based).
-- A message is admitted when every one of its keys holds a token, and then takes one from each.
-- Once a message of a group is refused, the group's later messages are refused too (offset order
-- within a fairness key). Buckets refill at `rate` tokens a second up to `burst`, from Redis TIME.
-- Returns {admitted ("1"/"0" per message), ms until a refused message's keys have a token (-1 if
-- none was refused), then each key's tokens (as text)}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local count = #KEYS
local rate, burst, tokens = {}, {}, {}
for i = 1, count do
  rate[i] = tonumber(ARGV[2 * i - 1])
  burst[i] = tonumber(ARGV[2 * i])
  local saved = redis.call('HMGET', KEYS[i], 't', 'at')
  local held, at = tonumber(saved[1]), tonumber(saved[2])
  if held == nil or at == nil then
    held, at = burst[i], now
  end
  if now > at then held = held + (now - at) * rate[i] / 1000 end
  tokens[i] = math.min(held, burst[i])
end
local admitted, blocked, wait = {}, {}, -1
local position = 2 * count + 1
while position <= #ARGV do
  local group, keys = ARGV[position], tonumber(ARGV[position + 1])
  local first = position + 2
  local ok = not blocked[group]
  if ok then
    for j = first, first + keys - 1 do
      local b = tonumber(ARGV[j])
      if tokens[b] < 1 then
        ok = false
        local ms = 60000
        if rate[b] > 0 then ms = math.ceil((1 - tokens[b]) * 1000 / rate[b]) end
        if wait < 0 or ms < wait then wait = ms end
      end
    end
  end
  if ok then
    for j = first, first + keys - 1 do
      local b = tonumber(ARGV[j])
      tokens[b] = tokens[b] - 1
    end
  else
    blocked[group] = true
  end
  admitted[#admitted + 1] = ok and '1' or '0'
  position = first + keys
end
local reply = {table.concat(admitted), wait}
for i = 1, count do
  redis.call('HSET', KEYS[i], 't', tostring(tokens[i]), 'at', now)
  local ttl_ms = 3600000
  if rate[i] > 0 then ttl_ms = math.ceil(burst[i] * 1000 / rate[i]) + 60000 end
  redis.call('PEXPIRE', KEYS[i], ttl_ms)
  reply[#reply + 1] = tostring(tokens[i])
end
return reply
