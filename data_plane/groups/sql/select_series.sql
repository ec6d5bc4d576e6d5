SELECT bucket_start, lag, consume_rate, produce_rate, time_to_drain_s FROM lag_series
WHERE group_id = %(group_id)s AND bucket_s = %(bucket_s)s
  AND bucket_start >= %(since)s AND bucket_start < %(until)s
ORDER BY bucket_start
