"""SQL of consumer-group membership and offsets, named."""

SELECT_ACTIVE_TOPIC = """
SELECT id, name, partitions, delivery FROM topics
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
"""

INSERT_GROUP = """
INSERT INTO consumer_groups (id, environment_id, topic_id, name) VALUES (%(id)s, %(environment_id)s, %(topic_id)s, %(name)s)
ON CONFLICT (topic_id, name) DO NOTHING
"""

# NO KEY UPDATE, not UPDATE: membership changes serialise on the group row, but pulls that insert
# leases (whose foreign key takes KEY SHARE on this row) must not wait for them — with FOR UPDATE a
# join waiting for partition rows held by a pull, and that pull waiting for this row, deadlocked.
LOCK_GROUP = """
SELECT * FROM consumer_groups WHERE topic_id = %(topic_id)s AND name = %(name)s
FOR NO KEY UPDATE
"""

SELECT_GROUP = """
SELECT * FROM consumer_groups WHERE topic_id = %(topic_id)s AND name = %(name)s
"""

# Consumers are the members within their session timeout (as in TOPIC_STATS): a silent member
# not yet evicted is not counted.
LIST_GROUPS = """
SELECT g.name, g.generation,
       (SELECT count(*) FROM group_members m
        WHERE m.group_id = g.id
          AND m.last_heartbeat_at >= now() - make_interval(secs => m.session_timeout_ms / 1000.0)) AS consumers,
       coalesce((SELECT sum(greatest(p.next_offset - gp.committed_offset, 0))
                 FROM group_partitions gp JOIN partitions p ON p.topic_id = g.topic_id AND p.partition = gp.partition
                 WHERE gp.group_id = g.id), 0) AS lag,
       (SELECT count(*) FROM dead_letters dl WHERE dl.group_id = g.id AND dl.replayed_at IS NULL) AS dead_letters
FROM consumer_groups g WHERE g.topic_id = %(topic_id)s ORDER BY g.name
"""

UPDATE_GROUP_CONFIG = """
UPDATE consumer_groups SET start_from = %(start_from)s, ack_timeout_ms = %(ack_timeout_ms)s,
       max_in_flight = %(max_in_flight)s, max_retries = %(max_retries)s, retry_delay_ms = %(retry_delay_ms)s,
       alert_threshold = %(alert_threshold)s, session_timeout_ms = %(session_timeout_ms)s, updated_at = now()
WHERE id = %(id)s
"""

DELETE_GROUP = """
DELETE FROM consumer_groups WHERE topic_id = %(topic_id)s AND name = %(name)s RETURNING id
"""

# The silent members, locked (a heartbeat committed meanwhile takes its member out of the set).
# Silence counts from the member's last heartbeat or the end of the last stall, whichever is
# later (qc_silence_origin: PostgreSQL's start, or the end of a gap in the API's pulse): nobody
# could heartbeat while the database was down or frozen, so a stall gives everyone a session
# instead of evicting every consumer at once (docs/faults.md).
LOCK_SILENT_MEMBERS = """
SELECT id FROM group_members
WHERE group_id = %(group_id)s
  AND greatest(last_heartbeat_at, qc_silence_origin(%(gap_s)s)) < now() - make_interval(secs => session_timeout_ms / 1000.0)
ORDER BY id FOR UPDATE
"""

DELETE_MEMBERS = """
DELETE FROM group_members WHERE group_id = %(group_id)s AND id = ANY(%(member_ids)s)
"""

# Before members are removed and their leases ended: every partition row of the group, in
# partition order, as pulls and acks lock them. Removing a member writes the rows it owns
# (owner_member_id SET NULL) and ending its leases writes lease rows that an ack in flight
# may need next; taking the partitions first, in order, means neither can close a cycle.
LOCK_ALL_GROUP_PARTITIONS = """
SELECT partition FROM group_partitions WHERE group_id = %(group_id)s ORDER BY partition FOR UPDATE
"""
# The periodic sweep's work list: groups of active topics (of one topic, when given) with a
# member silent past its session timeout, or fewer partitions than their topic (it grew). Scans,
# on purpose: an index on last_heartbeat_at would cost every pull (qc_pull) its HOT update,
# and the tables hold one row per joined consumer and per group partition.
GROUPS_TO_SWEEP = """
SELECT g.id FROM consumer_groups g
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
WHERE (%(topic_id)s::text IS NULL OR g.topic_id = %(topic_id)s::text)
  AND (EXISTS (SELECT 1 FROM group_members m
               WHERE m.group_id = g.id
                 AND greatest(m.last_heartbeat_at, qc_silence_origin(%(gap_s)s))
                     < now() - make_interval(secs => m.session_timeout_ms / 1000.0))
       OR (SELECT count(*) FROM group_partitions gp WHERE gp.group_id = g.id) < t.partitions)
ORDER BY g.id
"""

SELECT_ACTIVE_TOPIC_BY_ID = """
SELECT id, name, partitions, delivery FROM topics WHERE id = %(id)s AND status = 'active'
"""

# As LOCK_GROUP (NO KEY UPDATE, same reason), by id.
LOCK_GROUP_BY_ID = """
SELECT * FROM consumer_groups WHERE id = %(id)s FOR NO KEY UPDATE
"""

SELECT_MEMBERS = """
SELECT id, client_id, generation, session_timeout_ms, joined_at, last_heartbeat_at FROM group_members
WHERE group_id = %(group_id)s ORDER BY id
"""

INSERT_MEMBER = """
INSERT INTO group_members (id, group_id, client_id, session_timeout_ms, generation, max_in_flight)
VALUES (%(id)s, %(group_id)s, %(client_id)s, %(session_timeout_ms)s, %(generation)s, %(max_in_flight)s)
"""

# A member's own window (NULL: the group's maxInFlight); returns the member's effective window.
SET_MEMBER_WINDOW = """
UPDATE group_members m SET max_in_flight = %(max_in_flight)s
FROM consumer_groups g
WHERE m.id = %(id)s AND m.group_id = %(group_id)s AND g.id = m.group_id
RETURNING least(g.max_in_flight, coalesce(m.max_in_flight, g.max_in_flight)) AS window
"""

# The member's effective window: the smaller of the group's maxInFlight and its own.
MEMBER_WINDOW = """
SELECT least(g.max_in_flight, coalesce(m.max_in_flight, g.max_in_flight)) AS window
FROM group_members m JOIN consumer_groups g ON g.id = m.group_id
WHERE m.id = %(id)s AND m.group_id = %(group_id)s
"""

TOUCH_MEMBER = """
UPDATE group_members SET last_heartbeat_at = now() WHERE id = %(id)s AND group_id = %(group_id)s RETURNING generation
"""

# As TOUCH_MEMBER, for a member not yet silent past its session (by LOCK_SILENT_MEMBERS' rule).
TOUCH_LIVE_MEMBER = """
UPDATE group_members SET last_heartbeat_at = now()
WHERE id = %(id)s AND group_id = %(group_id)s
  AND greatest(last_heartbeat_at, qc_silence_origin(%(gap_s)s)) >= now() - make_interval(secs => session_timeout_ms / 1000.0)
RETURNING generation
"""

SYNC_MEMBER_GENERATION = """
UPDATE group_members SET generation = %(generation)s, last_heartbeat_at = now() WHERE id = %(id)s AND group_id = %(group_id)s
"""

LOCK_MEMBER = """
SELECT id FROM group_members WHERE id = %(id)s AND group_id = %(group_id)s FOR UPDATE
"""

# The group's first partitions start where startFrom says; partitions its topic gains later
# start at their beginning: every message in them was published after the group existed, so
# "latest" there would silently skip whatever arrived before the group noticed them. (The
# EXISTS sees the group's rows as they were before this statement.)
SEED_GROUP_PARTITIONS = """
INSERT INTO group_partitions (group_id, partition, committed_offset, delivered_offset)
SELECT %(group_id)s, p.partition, s.start, s.start
FROM partitions p
CROSS JOIN LATERAL (
  SELECT CASE
    WHEN %(start_from)s = 'earliest'
      OR EXISTS (SELECT 1 FROM group_partitions x WHERE x.group_id = %(group_id)s)
    THEN p.start_offset ELSE p.next_offset END AS start) s
WHERE p.topic_id = %(topic_id)s
ON CONFLICT (group_id, partition) DO NOTHING
"""

SELECT_GROUP_PARTITIONS = """
SELECT gp.partition, gp.owner_member_id, gp.committed_offset, p.next_offset, p.start_offset
FROM group_partitions gp JOIN partitions p ON p.topic_id = %(topic_id)s AND p.partition = gp.partition
WHERE gp.group_id = %(group_id)s ORDER BY gp.partition
"""

SET_OWNERS = """
UPDATE group_partitions gp SET owner_member_id = v.owner
FROM unnest(%(partitions)s::int[], %(owners)s::text[]) AS v(partition, owner)
WHERE gp.group_id = %(group_id)s AND gp.partition = v.partition
"""

BUMP_GENERATION = """
UPDATE consumer_groups SET generation = generation + 1, updated_at = now() WHERE id = %(id)s RETURNING generation
"""

# --- delivery, leases, acks -------------------------------------------------------------------

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

RELEASE_LEASES = """
UPDATE group_deliveries SET lease_until = now(), updated_at = now()
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s) AND state = 'leased' AND lease_until > now()
"""

WAKE_CONSUMERS = """
SELECT pg_notify('qc_publish', %(payload)s)
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

COUNT_MEMBERS = """
SELECT count(*) AS n FROM group_members WHERE group_id = %(group_id)s
"""

TOPIC_STATS = """
SELECT
  coalesce((SELECT sum(next_offset - start_offset) FROM partitions WHERE topic_id = %(topic_id)s), 0) AS depth,
  (SELECT count(*) FROM group_deliveries d JOIN consumer_groups g ON g.id = d.group_id
    WHERE g.topic_id = %(topic_id)s AND d.state = 'leased' AND d.lease_until > now())
  + coalesce((SELECT sum(l.open_count) FROM group_leases l JOIN consumer_groups g ON g.id = l.group_id
    WHERE g.topic_id = %(topic_id)s AND l.open_count > 0 AND l.lease_until > now()), 0) AS in_flight,
  (SELECT count(*) FROM group_members m JOIN consumer_groups g ON g.id = m.group_id
    WHERE g.topic_id = %(topic_id)s
      AND m.last_heartbeat_at >= now() - make_interval(secs => m.session_timeout_ms / 1000.0)) AS active_consumers,
  (SELECT count(*) FROM consumer_groups WHERE topic_id = %(topic_id)s) AS consumer_groups
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

# --- range leases (group_leases): the hot path, statements per request rather than per message --

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

RELEASE_RANGE_LEASES = """
UPDATE group_leases SET lease_until = now()
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s) AND open_count > 0 AND lease_until > now()
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
