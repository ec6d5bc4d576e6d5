SELECT id, organisation_id, project_id, name, created_at FROM environments WHERE project_id = %(project_id)s
ORDER BY array_position(ARRAY['development', 'staging', 'production'], name)
