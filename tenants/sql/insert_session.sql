INSERT INTO user_sessions (token_sha256, user_id, csrf_token, expires_at)
VALUES (%(token_sha256)s, %(user_id)s, %(csrf_token)s, now() + make_interval(secs => %(ttl_s)s))
