SELECT e.id, e.organisation_id, e.project_id, e.name FROM environments e WHERE e.id = %(id)s FOR UPDATE
