INSERT INTO topics (id, organisation_id, environment_id, name, partitions, retention_s, delivery,
                    latency_class)
VALUES (%(id)s, %(organisation_id)s, %(environment_id)s, %(name)s, %(partitions)s,
        %(retention_s)s, %(delivery)s, %(latency_class)s)
ON CONFLICT (environment_id, name) WHERE status = 'active' DO NOTHING
RETURNING id, organisation_id, environment_id, name, partitions, retention_s, delivery, latency_class,
status, created_at, updated_at
