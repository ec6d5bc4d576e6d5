-- KEYS: the logs of the account and address, of the address and of the account (sorted sets of
-- attempt times, µs), and the marker of an address known to the account. ARGV: this attempt's
-- member, then the limit and window (ms) of each log. Counts the attempt in the three logs if each
-- is under its limit (the account's is not checked for a known address). Returns {admitted 1/0,
-- ms until every log checked has room again}.
local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local known = redis.call('EXISTS', KEYS[4]) == 1
local wait_us = 0
for i = 1, 3 do
  local limit = tonumber(ARGV[2 * i])
  local window_us = tonumber(ARGV[2 * i + 1]) * 1000
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', string.format('%.0f', now_us - window_us))
  local count = redis.call('ZCARD', KEYS[i])
  if count >= limit and not (i == 3 and known) then
    local nth = redis.call('ZRANGE', KEYS[i], count - limit, count - limit, 'WITHSCORES')
    wait_us = math.max(wait_us, tonumber(nth[2]) + window_us - now_us)
  end
end
if wait_us > 0 then return {0, math.ceil(wait_us / 1000)} end
local score = string.format('%.0f', now_us)
for i = 1, 3 do
  redis.call('ZADD', KEYS[i], score, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 1])
end
return {1, 0}
