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

# Locks the partition rows in (topic_id, partition) order — the one fixed order every writer of
# every replica uses, so concurrent flushes never deadlock — then advances each sequencer.
# Partitions of topics being deleted are not returned: their publishes fail cleanly.
RESERVE_OFFSETS = """
WITH wanted AS (
    SELECT * FROM unnest(%(topic_ids)s::text[], %(partitions)s::integer[], %(counts)s::bigint[])
        AS w(topic_id, partition, n)
), locked AS MATERIALIZED (
    SELECT p.topic_id, p.partition FROM partitions p
    JOIN wanted w ON w.topic_id = p.topic_id AND w.partition = p.partition
    JOIN topics t ON t.id = p.topic_id AND t.status = 'active'
    ORDER BY p.topic_id, p.partition
    FOR UPDATE OF p
)
UPDATE partitions p SET next_offset = p.next_offset + w.n
FROM locked l JOIN wanted w ON w.topic_id = l.topic_id AND w.partition = l.partition
WHERE p.topic_id = l.topic_id AND p.partition = l.partition
RETURNING p.topic_id, p.partition, p.next_offset - w.n AS base_offset, p.next_offset
"""

# Keys are inserted in sorted order so two flushes racing on several keys wait in one order.
# An expired key is taken over; a live one is a duplicate and is not returned.
INSERT_IDEMPOTENCY_KEYS = """
INSERT INTO idempotency_keys (topic_id, idempotency_key, partition, "offset", published_at,
                              expires_at)
SELECT * FROM unnest(%(topic_ids)s::text[], %(keys)s::text[], %(partitions)s::integer[],
                     %(offsets)s::bigint[], %(published_at)s::timestamptz[],
                     %(expires_at)s::timestamptz[])
ORDER BY 1, 2
ON CONFLICT (topic_id, idempotency_key) DO UPDATE
    SET partition = excluded.partition, "offset" = excluded."offset",
        published_at = excluded.published_at, expires_at = excluded.expires_at
    WHERE idempotency_keys.expires_at <= now()
RETURNING topic_id, idempotency_key
"""

INSERT_SEGMENT_OBJECT = """
INSERT INTO segment_objects (object_key, size_bytes, block_count)
VALUES (%(object_key)s, %(size_bytes)s, %(block_count)s)
"""

INSERT_SEGMENT_BLOCKS = """
INSERT INTO segment_blocks (topic_id, partition, base_offset, count, object_key, byte_offset,
                            byte_length, min_timestamp_ms, max_timestamp_ms)
SELECT b.topic_id, b.partition, b.base_offset, b.count, %(object_key)s, b.byte_offset,
       b.byte_length, b.min_ts, b.max_ts
FROM unnest(%(topic_ids)s::text[], %(partitions)s::integer[], %(base_offsets)s::bigint[],
            %(counts)s::integer[], %(byte_offsets)s::bigint[], %(byte_lengths)s::integer[],
            %(min_ts)s::bigint[], %(max_ts)s::bigint[])
    AS b(topic_id, partition, base_offset, count, byte_offset, byte_length, min_ts, max_ts)
"""

PUBLISH_CHANNEL = "qc_publish"

NOTIFY_PUBLISHED = """
SELECT pg_notify('qc_publish', payload) FROM unnest(%(payloads)s::text[]) AS payload
"""
