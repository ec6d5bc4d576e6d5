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
INSERT INTO group_members (id, group_id, client_id, session_timeout_ms, generation)
VALUES (%(id)s, %(group_id)s, %(client_id)s, %(session_timeout_ms)s, %(generation)s)
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


RELEASE_LEASES = """
UPDATE group_deliveries SET lease_until = now(), updated_at = now()
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s) AND state = 'leased' AND lease_until > now()
"""

WAKE_CONSUMERS = """
SELECT pg_notify('qc_publish', %(payload)s)
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


RELEASE_RANGE_LEASES = """
UPDATE group_leases SET lease_until = now()
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s) AND open_count > 0 AND lease_until > now()
"""

COUNT_PENDING = """
SELECT count(*) AS depth FROM dead_letters WHERE group_id = %(group_id)s AND replayed_at IS NULL
"""
