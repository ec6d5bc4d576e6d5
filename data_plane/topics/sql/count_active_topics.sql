SELECT count(*) AS n FROM topics WHERE environment_id = %(environment_id)s AND status = 'active'
