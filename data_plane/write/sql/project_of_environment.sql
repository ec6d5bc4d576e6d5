SELECT project_id FROM environments WHERE id = %(environment_id)s
