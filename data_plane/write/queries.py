"""SQL of the write path: the flush commit (``qc_commit_flush``) and its lookups, named."""

from __future__ import annotations

PROJECT_OF_ENVIRONMENT = "SELECT project_id FROM environments WHERE id = %(environment_id)s"

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
