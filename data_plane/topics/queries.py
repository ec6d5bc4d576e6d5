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

# --- publishing -------------------------------------------------------------------------------

SELECT_IDEMPOTENCY_KEYS = """
SELECT idempotency_key, partition, "offset", published_at FROM idempotency_keys
WHERE topic_id = %(topic_id)s AND idempotency_key = ANY(%(keys)s::text[]) AND expires_at > now()
"""

SELECT_IDEMPOTENCY_KEYS_MANY = """
SELECT k.topic_id, k.idempotency_key, k.partition, k."offset", k.published_at
FROM idempotency_keys k
JOIN unnest(%(topic_ids)s::text[], %(keys)s::text[]) AS w(topic_id, idempotency_key)
  USING (topic_id, idempotency_key)
WHERE k.expires_at > now()
"""

# The whole flush commit in one statement (infra/migrations/0007_commit_flush.sql); one base
# offset per block, in the order of the arrays.
COMMIT_FLUSH = """
SELECT qc_commit_flush AS base_offset
FROM qc_commit_flush(%(object_key)s, %(size_bytes)s, %(blocks)s::jsonb, %(keys)s::jsonb)
"""

PUBLISH_CHANNEL = "qc_publish"

# After a lost commit reply: end the backend still running that commit (if it is), so what the
# lookup below sees is final. pg_terminate_backend waits up to 2 s for the backend to exit.
END_LOST_COMMIT = """
SELECT pg_terminate_backend(pid, 2000) AS ended FROM pg_stat_activity
WHERE pid = %(pid)s AND state = 'active' AND query LIKE '%%qc_commit_flush%%'
"""

# The blocks a flush committed, found by its object key (one row per block, or none).
SELECT_BLOCKS_OF_OBJECT = """
SELECT topic_id, partition, base_offset FROM segment_blocks WHERE object_key = %(object_key)s
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
