DELETE FROM user_sessions WHERE token_sha256 = %(token_sha256)s
