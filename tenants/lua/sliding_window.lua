-- KEYS[1] the organisation's limits ("publish consume admin lease"), KEYS[2] this key's window
-- (zset). ARGV: category index (1-4), window ms, unique member prefix, limits to store on a miss ('' =
-- report the miss as -1), limits TTL s, slots wanted. Adds as many of the wanted slots as fit
-- under the limit; returns {granted, limit, remaining, reset_ms}.
local limits = redis.call('GET', KEYS[1])
if not limits then
  if ARGV[4] == '' then return {-1, 0, 0, 0} end
  limits = ARGV[4]
  redis.call('SET', KEYS[1], limits, 'EX', ARGV[5])
end
local wanted, index, limit = tonumber(ARGV[1]), 0, 0
for value in string.gmatch(limits, '%d+') do
  index = index + 1
  if index == wanted then limit = tonumber(value) end
end
local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local window_ms = tonumber(ARGV[2])
local window_us = window_ms * 1000
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now_us - window_us))
local count = redis.call('ZCARD', KEYS[2])
local granted = math.max(math.min(tonumber(ARGV[6]), limit - count), 0)
if granted > 0 then
  local score = string.format('%.0f', now_us)
  local member = score .. ':' .. ARGV[3] .. ':'
  for first = 1, granted, 200 do
    local pairs = {}
    for i = first, math.min(first + 199, granted) do
      pairs[#pairs + 1] = score
      pairs[#pairs + 1] = member .. i
    end
    redis.call('ZADD', KEYS[2], unpack(pairs))
  end
  count = count + granted
  redis.call('PEXPIRE', KEYS[2], window_ms)
end
local reset_ms = window_ms
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset_ms = math.ceil((tonumber(oldest[2]) + window_us - now_us) / 1000)
end
return {granted, limit, math.max(limit - count, 0), reset_ms}
