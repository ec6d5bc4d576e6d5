INSERT INTO projects (id, organisation_id, name) VALUES (%(id)s, %(organisation_id)s, %(name)s)
ON CONFLICT (organisation_id, name) DO NOTHING
RETURNING id, organisation_id, name, created_at
