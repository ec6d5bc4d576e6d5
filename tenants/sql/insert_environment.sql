INSERT INTO environments (id, organisation_id, project_id, name)
VALUES (%(id)s, %(organisation_id)s, %(project_id)s, %(name)s)
RETURNING id, organisation_id, project_id, name, created_at
