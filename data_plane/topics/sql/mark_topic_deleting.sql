UPDATE topics SET status = 'deleting', updated_at = now()
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
RETURNING id, organisation_id, environment_id, name, partitions, retention_s, delivery, latency_class,
status, created_at, updated_at
