SELECT id, name, tier, custom_limits, created_at FROM organisations WHERE id = %(id)s
