SELECT done_through, full_at FROM maintenance_cursors WHERE name = %(name)s
