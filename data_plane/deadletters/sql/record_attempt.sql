UPDATE webhook_deliveries SET
    attempts = attempts + 1,
    status = %(status)s,
    last_status_code = %(status_code)s,
    last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(retry_in_s)s),
    delivered_at = CASE WHEN %(status)s = 'delivered' THEN now() END,
    updated_at = now()
WHERE id = %(id)s
RETURNING attempts
