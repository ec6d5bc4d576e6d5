-- A group's stats (Fila's GetStats): lag, what is in flight, what is done above the committed
-- offset (acked out of order or dead-lettered), live members, and each partition's window bounds.
SELECT
  coalesce((SELECT sum(greatest(p.next_offset - gp.committed_offset, 0))
            FROM group_partitions gp JOIN partitions p ON p.topic_id = %(topic_id)s AND p.partition = gp.partition
            WHERE gp.group_id = %(group_id)s), 0) AS lag,
  (SELECT count(*) FROM group_deliveries d
    WHERE d.group_id = %(group_id)s AND d.state = 'leased' AND d.lease_until > now())
  + coalesce((SELECT sum(l.open_count) FROM group_leases l
    WHERE l.group_id = %(group_id)s AND l.open_count > 0 AND l.lease_until > now()), 0) AS in_flight,
  (SELECT count(*) FROM group_deliveries d JOIN group_partitions gp USING (group_id, partition)
    WHERE d.group_id = %(group_id)s AND d.state IN ('acked', 'dead') AND d."offset" >= gp.committed_offset)
  + coalesce((SELECT sum(bit_count(substring(l.acked FROM greatest(gp.committed_offset - l.first_offset, 0)::int + 1)))
    FROM group_leases l JOIN group_partitions gp USING (group_id, partition)
    WHERE l.group_id = %(group_id)s AND l.last_offset >= gp.committed_offset), 0) AS done_ahead,
  (SELECT count(*) FROM group_members m
    WHERE m.group_id = %(group_id)s
      AND m.last_heartbeat_at >= now() - make_interval(secs => m.session_timeout_ms / 1000.0)) AS active_consumers,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(gp.partition, gp.delivered_offset, p.next_offset)
                             ORDER BY gp.partition), '[]'::jsonb)
   FROM group_partitions gp JOIN partitions p ON p.topic_id = %(topic_id)s AND p.partition = gp.partition
   WHERE gp.group_id = %(group_id)s) AS windows
