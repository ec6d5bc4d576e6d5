INSERT INTO organisations (id, name, tier, custom_limits) VALUES (%(id)s, %(name)s, %(tier)s, %(custom_limits)s)
RETURNING id, name, tier, custom_limits, created_at
