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
