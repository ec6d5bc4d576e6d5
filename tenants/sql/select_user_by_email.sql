SELECT id, email, password_hash FROM users WHERE lower(email) = lower(%(email)s)
