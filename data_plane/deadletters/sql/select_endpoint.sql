SELECT environment_id, url, secret, created_at, updated_at, secret_created_at FROM alert_endpoints
WHERE environment_id = %(environment_id)s
