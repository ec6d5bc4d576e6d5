-- KEYS[1] the account's log, KEYS[2] the address's log (sorted sets of attempt times, µs).
-- ARGV: window ms, account limit, address limit, this attempt's member. Counts the attempt in
-- both logs if each is under its limit. Returns {admitted 1/0, ms until both have room again}.
local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local window_us = tonumber(ARGV[1]) * 1000
local wait_us = 0
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[i + 1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now_us - window_us))
  local count = redis.call('ZCARD', key)
  if count >= limit then
    local nth = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
    wait_us = math.max(wait_us, tonumber(nth[2]) + window_us - now_us)
  end
end
if wait_us > 0 then return {0, math.ceil(wait_us / 1000)} end
local score = string.format('%.0f', now_us)
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, score, ARGV[4])
  redis.call('PEXPIRE', key, ARGV[1])
end
return {1, 0}
