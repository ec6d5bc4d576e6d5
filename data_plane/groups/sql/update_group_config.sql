UPDATE consumer_groups SET start_from = %(start_from)s, ack_timeout_ms = %(ack_timeout_ms)s,
       max_in_flight = %(max_in_flight)s, max_retries = %(max_retries)s, retry_delay_ms = %(retry_delay_ms)s,
       alert_threshold = %(alert_threshold)s, session_timeout_ms = %(session_timeout_ms)s, updated_at = now()
WHERE id = %(id)s
