INSERT INTO users (id, email, password_hash) VALUES (%(id)s, %(email)s, %(password_hash)s)
ON CONFLICT DO NOTHING
RETURNING id, email, created_at
