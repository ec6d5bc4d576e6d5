UPDATE topics SET partitions = %(partitions)s, retention_s = %(retention_s)s,
                  latency_class = %(latency_class)s, updated_at = now()
WHERE id = %(id)s
RETURNING id, organisation_id, environment_id, name, partitions, retention_s, delivery, latency_class,
status, created_at, updated_at
