"""Every SQL statement of the data-plane store, named (one flat module of string constants)."""

# --- topics -----------------------------------------------------------------------------------

TOPIC_COLUMNS = """
id, organisation_id, environment_id, name, partitions, retention_s, delivery, latency_class,
status, created_at, updated_at
"""

LOCK_ENVIRONMENT_TOPICS = """
SELECT pg_advisory_xact_lock(hashtextextended('qc_topics:' || %(environment_id)s, 0))
"""

COUNT_ACTIVE_TOPICS = """
SELECT count(*) AS n FROM topics WHERE environment_id = %(environment_id)s AND status = 'active'
"""

INSERT_TOPIC = f"""
INSERT INTO topics (id, organisation_id, environment_id, name, partitions, retention_s, delivery,
                    latency_class)
VALUES (%(id)s, %(organisation_id)s, %(environment_id)s, %(name)s, %(partitions)s,
        %(retention_s)s, %(delivery)s, %(latency_class)s)
ON CONFLICT (environment_id, name) WHERE status = 'active' DO NOTHING
RETURNING {TOPIC_COLUMNS}
"""

INSERT_PARTITIONS = """
INSERT INTO partitions (topic_id, partition)
SELECT %(topic_id)s, p FROM generate_series(%(first)s::integer, %(last)s::integer) AS p
ON CONFLICT DO NOTHING
"""

LIST_TOPICS = f"""
SELECT {TOPIC_COLUMNS} FROM topics
WHERE environment_id = %(environment_id)s AND status = 'active'
ORDER BY name
"""

SELECT_TOPIC = f"""
SELECT {TOPIC_COLUMNS} FROM topics
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
"""

LOCK_TOPIC = f"""
SELECT {TOPIC_COLUMNS} FROM topics
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
FOR UPDATE
"""

UPDATE_TOPIC = f"""
UPDATE topics SET partitions = %(partitions)s, retention_s = %(retention_s)s,
                  latency_class = %(latency_class)s, updated_at = now()
WHERE id = %(id)s
RETURNING {TOPIC_COLUMNS}
"""

MARK_TOPIC_DELETING = f"""
UPDATE topics SET status = 'deleting', updated_at = now()
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
RETURNING {TOPIC_COLUMNS}
"""


# --- dashboard read models --------------------------------------------------------------------

# Retained messages per active topic of an environment (as TOPIC_STATS counts depth).
TOPIC_DEPTHS = """
SELECT t.id, coalesce(sum(p.next_offset - p.start_offset), 0) AS depth
FROM topics t LEFT JOIN partitions p ON p.topic_id = t.id
WHERE t.environment_id = %(environment_id)s AND t.status = 'active'
GROUP BY t.id
"""

SELECT_PARTITIONS = """
SELECT partition, start_offset, next_offset FROM partitions
WHERE topic_id = %(topic_id)s ORDER BY partition
"""
