"""SQL of delivery: pulls, leases, acks, redeliveries, dead-lettering and committed offsets, named."""

SELECT_GROUP_FOR_DELIVERY = """
SELECT g.*, t.delivery FROM consumer_groups g JOIN topics t ON t.id = g.topic_id
WHERE g.topic_id = %(topic_id)s AND g.name = %(name)s
"""

DUE_REDELIVERIES = """
SELECT "offset", attempt, state, first_delivered_at, last_error FROM group_deliveries
WHERE group_id = %(group_id)s AND partition = %(partition)s
  AND ((state = 'leased' AND lease_until <= now()) OR (state = 'retry' AND available_at <= now()))
ORDER BY "offset" LIMIT %(limit)s FOR UPDATE
"""

# A pull's redeliveries of one partition leased again in one statement, each with a new ackId.
LEASE_AGAIN_MANY = """
UPDATE group_deliveries d SET state = 'leased', attempt = v.attempt, ack_id = v.ack_id, member_id = %(member_id)s,
       lease_until = clock_timestamp() + make_interval(secs => %(ack_timeout_s)s), available_at = NULL, updated_at = now()
FROM unnest(%(offsets)s::bigint[], %(attempts)s::int[], %(ack_ids)s::text[]) AS v("offset", attempt, ack_id)
WHERE d.group_id = %(group_id)s AND d.partition = %(partition)s AND d."offset" = v."offset"
"""

SELECT_BY_ACK_IDS = """
SELECT partition, "offset", ack_id FROM group_deliveries WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s)
"""

LOCK_GROUP_PARTITION = """
SELECT partition, committed_offset, delivered_offset FROM group_partitions
WHERE group_id = %(group_id)s AND partition = %(partition)s FOR UPDATE
"""

LOCK_DELIVERY_BY_ACK = """
SELECT partition, "offset", state, attempt, ack_id, lease_until, lease_until <= now() AS expired, first_delivered_at
FROM group_deliveries WHERE group_id = %(group_id)s AND ack_id = %(ack_id)s FOR UPDATE
"""

MARK_RETRY = """
UPDATE group_deliveries SET state = 'retry', ack_id = NULL, lease_until = NULL, last_error = %(error)s,
       available_at = now() + make_interval(secs => %(delay_s)s), updated_at = now()
WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = %(offset)s
"""

# Dead letters of one partition, set-based: the copies (for messages still stored) and the rows
# marked dead, one statement each however many there are.
MARK_DEAD = """
UPDATE group_deliveries d SET state = 'dead', ack_id = NULL, lease_until = NULL, last_error = v.error, updated_at = now()
FROM unnest(%(offsets)s::bigint[], %(errors)s::text[]) AS v("offset", error)
WHERE d.group_id = %(group_id)s AND d.partition = %(partition)s AND d."offset" = v."offset"
"""

INSERT_DEAD_LETTERS = """
INSERT INTO dead_letters (id, group_id, partition, "offset", message_key, headers, value, published_at_ms, error, attempts,
                          first_delivered_at)
SELECT v.id, %(group_id)s, %(partition)s, v."offset", v.message_key, v.headers, v.value, v.published_at_ms, v.error,
       v.attempts, v.first_delivered_at
FROM unnest(%(ids)s::text[], %(offsets)s::bigint[], %(keys)s::bytea[], %(headers)s::jsonb[], %(values)s::bytea[],
            %(published_at_ms)s::bigint[], %(errors)s::text[], %(attempts)s::int[], %(first_delivered_at)s::timestamptz[])
  AS v(id, "offset", message_key, headers, value, published_at_ms, error, attempts, first_delivered_at)
ON CONFLICT (group_id, partition, "offset") DO UPDATE
  SET error = excluded.error, attempts = excluded.attempts, first_delivered_at = excluded.first_delivered_at,
      dead_at = now(), replayed_at = NULL
"""

# The dead-letter copies of these offsets: a replayed message retention has dropped since is
# delivered from its copy (migration 0013). A message never changes, so any copy is the message.
SELECT_DEAD_LETTER_COPIES = """
SELECT "offset", message_key, headers, value, published_at_ms FROM dead_letters
WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = ANY(%(offsets)s)
"""

EXTEND_LEASE = """
UPDATE group_deliveries SET lease_until = clock_timestamp() + make_interval(secs => %(seconds)s), updated_at = now()
WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s) AND state = 'leased' AND lease_until > now()
RETURNING ack_id
"""

SELECT_OFFSETS = """
SELECT gp.partition, gp.committed_offset, p.next_offset, p.start_offset
FROM group_partitions gp JOIN partitions p ON p.topic_id = %(topic_id)s AND p.partition = gp.partition
WHERE gp.group_id = %(group_id)s AND (%(partition)s::int IS NULL OR gp.partition = %(partition)s::int)
ORDER BY gp.partition
"""

SEEK_PARTITION = """
UPDATE group_partitions SET committed_offset = %(offset)s, delivered_offset = %(offset)s
WHERE group_id = %(group_id)s AND partition = %(partition)s
"""

# A seek drops what is in flight on the partition; replays among it go back to the dead-letter
# queue rather than being lost.
FORGET_PARTITION_DELIVERIES = """
WITH forgotten AS (
  DELETE FROM group_deliveries WHERE group_id = %(group_id)s AND partition = %(partition)s AND state <> 'dead'
  RETURNING "offset", replay
)
UPDATE dead_letters dl SET replayed_at = NULL FROM forgotten f
WHERE dl.group_id = %(group_id)s AND dl.partition = %(partition)s AND dl."offset" = f."offset" AND f.replay
"""

SELECT_LEASES_BY_ACK_IDS = """
SELECT ack_id, partition, "offset", state, lease_until <= now() AS expired FROM group_deliveries
WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s)
"""

LOCK_GROUP_PARTITIONS = """
SELECT partition FROM group_partitions
WHERE group_id = %(group_id)s AND partition = ANY(%(partitions)s) ORDER BY partition FOR UPDATE
"""

ACK_LEASES = """
UPDATE group_deliveries SET state = 'acked', lease_until = NULL, updated_at = now()
WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s) AND state = 'leased'
  AND (NOT %(strict)s OR lease_until > now())
RETURNING ack_id, partition
"""

# A pull in one statement (migration 0009): touch, lock, state and fresh blocks, and, when no
# redelivery is due on the member's partitions, the fresh offsets leased with these lease ids.
PULL = """
SELECT qc_pull(%(group_id)s, %(member_id)s, %(topic_id)s, %(limit)s, %(async_commit)s,
               %(lease_ids)s::text[]) AS pulled
"""

# A pull's own range leases whose messages it could not read, ended now so that the next pull
# of their partitions redelivers them. Partitions first, in partition order, as pulls and acks
# lock them.
EXPIRE_RANGE_LEASES = """
WITH locked AS (
  SELECT partition FROM group_partitions
  WHERE group_id = %(group_id)s AND partition = ANY(%(partitions)s) ORDER BY partition FOR UPDATE
)
UPDATE group_leases SET lease_until = now()
WHERE group_id = %(group_id)s AND lease_id = ANY(%(lease_ids)s) AND lease_until > now()
  AND partition IN (SELECT partition FROM locked)
"""

# One range lease per partition of a pull, and delivered_offset moved past it, in one statement.
INSERT_RANGE_LEASES = """
WITH advanced AS (
  UPDATE group_partitions gp SET delivered_offset = v.last_offset + 1
  FROM unnest(%(partitions)s::int[], %(last_offsets)s::bigint[]) AS v(partition, last_offset)
  WHERE gp.group_id = %(group_id)s AND gp.partition = v.partition
)
INSERT INTO group_leases (group_id, partition, lease_id, first_offset, last_offset, member_id, lease_until, acked, done,
                          open_count)
SELECT %(group_id)s, v.partition, v.lease_id, v.first_offset, v.last_offset, %(member_id)s,
       clock_timestamp() + make_interval(secs => %(ack_timeout_s)s),
       repeat('0', (v.last_offset - v.first_offset + 1)::int)::varbit,
       repeat('0', (v.last_offset - v.first_offset + 1)::int)::varbit,
       (v.last_offset - v.first_offset + 1)::int
FROM unnest(%(partitions)s::int[], %(lease_ids)s::text[], %(first_offsets)s::bigint[], %(last_offsets)s::bigint[])
  AS v(partition, lease_id, first_offset, last_offset)
"""

# The partitions of these leases and per-message ack ids, locked in partition order (as pulls do).
LOCK_ACK_PARTITIONS = """
SELECT partition FROM group_partitions
WHERE group_id = %(group_id)s AND partition IN (
    SELECT l.partition FROM group_leases l WHERE l.group_id = %(group_id)s AND l.lease_id = ANY(%(lease_ids)s)
    UNION
    SELECT d.partition FROM group_deliveries d WHERE d.group_id = %(group_id)s AND d.ack_id = ANY(%(ack_ids)s))
ORDER BY partition FOR UPDATE
"""

SELECT_RANGE_LEASES = """
SELECT lease_id, partition, first_offset, last_offset, acked::text AS acked, done::text AS done, member_id,
       lease_until, lease_until <= now() AS expired, delivered_at
FROM group_leases WHERE group_id = %(group_id)s AND lease_id = ANY(%(lease_ids)s)
"""

SELECT_EXPIRED_RANGE_LEASES = """
SELECT lease_id, partition, first_offset, last_offset, acked::text AS acked, done::text AS done, member_id,
       lease_until, true AS expired, delivered_at
FROM group_leases
WHERE group_id = %(group_id)s AND partition = %(partition)s AND open_count > 0 AND lease_until <= now()
ORDER BY first_offset
"""

# New bitmaps for leases; with %(strict)s (an exactly-once ack) only where the lease is current.
SET_RANGE_BITS = """
UPDATE group_leases l SET acked = v.acked::varbit, done = v.done::varbit, open_count = v.open_count
FROM unnest(%(lease_ids)s::text[], %(acked)s::text[], %(done)s::text[], %(open_counts)s::int[])
  AS v(lease_id, acked, done, open_count)
WHERE l.group_id = %(group_id)s AND l.lease_id = v.lease_id AND (NOT %(strict)s OR l.lease_until > now())
RETURNING l.lease_id
"""

# Offsets leaving a range lease (nack, partial extend, expiry) become per-message leases with the
# range's ack id, attempt 1 and its lease end, so the per-message rules take over from there.
# An offset that has a row already is one a replay put back (a seek back leased it afresh while
# its dead letter waited): that row delivers it, once.
INSERT_SPLIT_DELIVERIES = """
INSERT INTO group_deliveries (group_id, partition, "offset", state, attempt, ack_id, member_id, lease_until,
                              first_delivered_at)
SELECT %(group_id)s, v.p, v.o, 'leased', 1, v.a, v.m, v.u, v.d
FROM unnest(%(p)s::int[], %(o)s::bigint[], %(a)s::text[], %(m)s::text[], %(u)s::timestamptz[], %(d)s::timestamptz[])
  AS v(p, o, a, m, u, d)
ON CONFLICT (group_id, partition, "offset") DO NOTHING
"""

EXTEND_RANGE_LEASES = """
UPDATE group_leases SET lease_until = clock_timestamp() + make_interval(secs => %(seconds)s)
WHERE group_id = %(group_id)s AND lease_id = ANY(%(lease_ids)s) AND open_count > 0 AND lease_until > now()
RETURNING lease_id
"""

FORGET_PARTITION_LEASES = """
DELETE FROM group_leases WHERE group_id = %(group_id)s AND partition = %(partition)s
"""

# Committed offset = lowest offset not done among per-message rows, range leases and
# delivered_offset; never moves back. Rows and leases wholly below it are forgotten. The
# statement is the function qc_commit_progress (migration 0010), which acks also run in SQL.
COMMIT_PROGRESS = """
SELECT partition, committed_offset FROM qc_commit_progress(%(group_id)s, %(partitions)s::int[])
"""

# Tombstones of leases and per-message rows that qc_commit_progress forgot (migration 0012): what
# was acked through them, read only when an ack names a lease that is gone.
SELECT_SETTLED_ACKS = """
SELECT ack_key, acked::text AS acked FROM settled_acks
WHERE group_id = %(group_id)s AND ack_key = ANY(%(keys)s)
"""

# In batches, each its own transaction on an autocommit connection.
PURGE_SETTLED_ACKS = """
DELETE FROM settled_acks WHERE ctid IN (
    SELECT ctid FROM settled_acks WHERE settled_at < now() - make_interval(secs => %(grace_s)s)
    LIMIT %(batch)s)
"""

# An ack request's range leases in one statement (migration 0010): partitions locked, the named
# offsets acked where all of them are open, committed offsets moved; returns the leases acked.
ACK_RANGES = """
SELECT qc_ack_ranges(%(group_id)s, %(strict)s, %(lease_ids)s::text[], %(masks)s::text[]) AS acked
"""
