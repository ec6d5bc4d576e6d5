DELETE FROM alert_endpoints WHERE environment_id = %(environment_id)s RETURNING environment_id
