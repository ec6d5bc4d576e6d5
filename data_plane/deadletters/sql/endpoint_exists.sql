SELECT 1 AS found FROM alert_endpoints WHERE environment_id = %(environment_id)s
