INSERT INTO maintenance_cursors (name, done_through, full_at) VALUES (%(name)s, %(done_through)s, %(full_at)s)
ON CONFLICT (name) DO UPDATE
SET done_through = greatest(maintenance_cursors.done_through, excluded.done_through),
    full_at = greatest(maintenance_cursors.full_at, excluded.full_at), updated_at = now()
