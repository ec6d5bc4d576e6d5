-- One environment's rows in ``[from, to)``, summed per UTC hour or day. ``storage_byte_hours``
-- adds each hour's average stored bytes (an hour without samples adds nothing).
SELECT date_trunc(%(unit)s, hour, 'UTC') AS start,
       sum(messages_in)::bigint AS messages_in, sum(bytes_in)::bigint AS bytes_in,
       sum(messages_out)::bigint AS messages_out, sum(bytes_out)::bigint AS bytes_out,
       sum(publish_requests)::bigint AS publish_requests, sum(consume_requests)::bigint AS consume_requests,
       sum(admin_requests)::bigint AS admin_requests,
       coalesce(sum(storage_bytes_sum::float8 / nullif(storage_samples, 0)), 0) AS storage_byte_hours,
       max(storage_bytes_max)::bigint AS storage_bytes_max
FROM usage_hourly
WHERE environment_id = %(environment_id)s AND hour >= %(from)s AND hour < %(to)s
GROUP BY 1
ORDER BY 1
