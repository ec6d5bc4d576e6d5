-- Turn push on or change its settings. The secret is replaced only on creation or rotation; `fresh`
-- says whether the candidate secret was stored (the answer then shows it, once).
INSERT INTO group_push (group_id, endpoint, max_in_flight, timeout_ms, ordered, secret, secret_hint)
VALUES (%(group_id)s, %(endpoint)s, %(max_in_flight)s, %(timeout_ms)s, %(ordered)s, %(secret)s, %(secret_hint)s)
ON CONFLICT (group_id) DO UPDATE SET
    endpoint = excluded.endpoint,
    max_in_flight = excluded.max_in_flight,
    timeout_ms = excluded.timeout_ms,
    ordered = excluded.ordered,
    secret = CASE WHEN %(rotate)s THEN excluded.secret ELSE group_push.secret END,
    secret_hint = CASE WHEN %(rotate)s THEN excluded.secret_hint ELSE group_push.secret_hint END,
    secret_created_at = CASE WHEN %(rotate)s THEN now() ELSE group_push.secret_created_at END,
    updated_at = now()
RETURNING secret = %(secret)s AS fresh
