SELECT id, email FROM users WHERE lower(email) = lower(%(email)s)
