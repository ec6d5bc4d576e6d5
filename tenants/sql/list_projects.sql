SELECT id, organisation_id, name, created_at FROM projects WHERE organisation_id = %(organisation_id)s ORDER BY created_at, id
