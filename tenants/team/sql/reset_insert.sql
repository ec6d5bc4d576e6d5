INSERT INTO password_resets (token_sha256, user_id, expires_at)
VALUES (%(token_sha256)s, %(user_id)s, now() + make_interval(secs => %(ttl_s)s))
RETURNING expires_at
