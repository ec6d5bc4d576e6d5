-- qc_pull_state: the current definition, applied (CREATE OR REPLACE) after every migration.
--
-- A pull's first round trip in one statement (docs/decisions.md §14). It ran as four statements
-- in one pipeline, and psycopg sends and polls once per statement. Called inside the pull's
-- transaction: the member row and the partition rows stay locked until the pull commits. In
-- READ COMMITTED each statement of a volatile function takes a new snapshot, so every step
-- still sees what was committed before it ran, as the separate statements did.
--
-- The steps, in their old order:
--   1. touch the member (a pull counts as a heartbeat), with the group's current settings;
--   2. lock the member's partitions in partition order, the order acks and removals use;
--   3. read its in-flight count, the partitions with redelivery work due, and the next wakeup;
--   4. read the index rows of the blocks holding each owned partition's next p_limit offsets.
-- Returns {settings, owned, state, blocks}; settings is null when the member is gone, and then
-- nothing is locked or read. With p_async_commit the pull's commit does not wait for the WAL
-- flush (the API passes false since a crash could forget a lease, docs/decisions.md §11).
--
-- The fresh blocks are of a pull read through the index, whatever the statistics say (docs/decisions.md
-- §18). The first form of this function had the upper bound of the blocks wanted referred to the
-- partitions row joined outside the LATERAL subquery, so it could not bound the index scan; with
-- the statistics of a young table a cached generic plan hash-joined EVERY block of the topic
-- instead (3.6 ms a pull after 15 s of a benchmark, growing with the topic). Now both bounds come
-- from the group partition row (a committed block always starts below next_offset), and the
-- LIMIT keeps the subquery from being flattened, so it is a per-partition index range scan.
-- Nothing else in the function changes.
CREATE OR REPLACE FUNCTION qc_pull_state(
    p_group_id     text,
    p_member_id    text,
    p_topic_id     text,
    p_limit        integer,
    p_async_commit boolean
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_settings jsonb;
    v_owned    jsonb;
    v_state    jsonb;
    v_blocks   jsonb;
BEGIN
    IF p_async_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;

    UPDATE group_members m SET last_heartbeat_at = now()
    FROM consumer_groups g JOIN topics t ON t.id = g.topic_id
    WHERE m.id = p_member_id AND m.group_id = p_group_id AND g.id = m.group_id
    RETURNING jsonb_build_object(
        'active', t.status = 'active', 'ack_timeout_ms', g.ack_timeout_ms,
        'max_in_flight', g.max_in_flight, 'max_retries', g.max_retries,
        'retry_delay_ms', g.retry_delay_ms, 'session_timeout_ms', m.session_timeout_ms)
    INTO v_settings;
    IF v_settings IS NULL OR NOT (v_settings->>'active')::boolean THEN
        RETURN jsonb_build_object('settings', v_settings);
    END IF;

    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'partition', o.partition, 'committed_offset', o.committed_offset,
               'delivered_offset', o.delivered_offset, 'next_offset', o.next_offset)
               ORDER BY o.partition), '[]'::jsonb)
    INTO v_owned
    FROM (
        SELECT gp.partition, gp.committed_offset, gp.delivered_offset, p.next_offset
        FROM group_partitions gp
        JOIN partitions p ON p.topic_id = p_topic_id AND p.partition = gp.partition
        WHERE gp.group_id = p_group_id AND gp.owner_member_id = p_member_id
        ORDER BY gp.partition
        FOR UPDATE OF gp
    ) o;

    SELECT jsonb_build_object(
      'in_flight',
        (SELECT count(*) FROM group_deliveries d
          WHERE d.group_id = p_group_id AND d.member_id = p_member_id AND d.state = 'leased'
            AND d.lease_until > now())
        + coalesce((SELECT sum(l.open_count) FROM group_leases l
          WHERE l.group_id = p_group_id AND l.member_id = p_member_id AND l.open_count > 0
            AND l.lease_until > now()), 0),
      'due_partitions', to_jsonb(ARRAY(
        SELECT d.partition FROM group_deliveries d
        WHERE d.group_id = p_group_id AND d.state = 'leased' AND d.lease_until <= now()
        UNION SELECT d.partition FROM group_deliveries d
        WHERE d.group_id = p_group_id AND d.state = 'retry' AND d.available_at <= now()
        UNION SELECT l.partition FROM group_leases l
        WHERE l.group_id = p_group_id AND l.open_count > 0 AND l.lease_until <= now())),
      'wakeup', least(
        (SELECT min(d.lease_until) FROM group_deliveries d
           JOIN group_partitions gp USING (group_id, partition)
          WHERE d.group_id = p_group_id AND gp.owner_member_id = p_member_id
            AND d.state = 'leased'),
        (SELECT min(d.available_at) FROM group_deliveries d
           JOIN group_partitions gp USING (group_id, partition)
          WHERE d.group_id = p_group_id AND gp.owner_member_id = p_member_id
            AND d.state = 'retry'),
        (SELECT min(l.lease_until) FROM group_leases l
           JOIN group_partitions gp USING (group_id, partition)
          WHERE l.group_id = p_group_id AND gp.owner_member_id = p_member_id
            AND l.open_count > 0)))
    INTO v_state;

    SELECT coalesce(jsonb_agg(jsonb_build_array(
               gp.partition, b.base_offset, b.count, b.object_key, b.byte_offset, b.byte_length)
               ORDER BY gp.partition, b.base_offset), '[]'::jsonb)
    INTO v_blocks
    FROM group_partitions gp
    JOIN partitions p ON p.topic_id = p_topic_id AND p.partition = gp.partition
    CROSS JOIN LATERAL (
      SELECT sb.base_offset, sb.count, sb.object_key, sb.byte_offset, sb.byte_length
      FROM segment_blocks sb
      WHERE sb.topic_id = p_topic_id AND sb.partition = gp.partition
        AND sb.base_offset >= coalesce(
            (SELECT max(s2.base_offset) FROM segment_blocks s2
             WHERE s2.topic_id = p_topic_id AND s2.partition = gp.partition
               AND s2.base_offset <= gp.delivered_offset),
            gp.delivered_offset)
        AND sb.base_offset < gp.delivered_offset + p_limit
      ORDER BY sb.base_offset
      LIMIT p_limit
    ) b
    WHERE gp.group_id = p_group_id AND gp.owner_member_id = p_member_id
      AND gp.delivered_offset < p.next_offset;

    RETURN jsonb_build_object(
        'settings', v_settings, 'owned', v_owned, 'state', v_state, 'blocks', v_blocks);
END;
$$;
