UPDATE organisations SET tier = %(tier)s, custom_limits = %(custom_limits)s WHERE id = %(id)s
RETURNING id, name, tier, custom_limits, created_at
