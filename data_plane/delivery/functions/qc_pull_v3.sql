-- qc_pull_v3: the current definition, applied (CREATE OR REPLACE) after every migration.
-- It is qc_pull_v2 with one check more (migration 0026): a fair group (a group_fairness row, whose
-- pulls schedule by fairness key and may deliver above a partition's delivered_offset) leases
-- nothing here and answers 'fair': true, so a replica whose cache still took the group for an
-- ordinary one takes the fair path (data_plane/delivery/fair.py) instead of leasing offsets from
-- delivered_offset that a fair pull may have delivered already. For every other group the check
-- is one primary-key probe that finds nothing; the rest is qc_pull_v2 unchanged. qc_pull_v2 stays
-- for replicas of the previous release (enable fairness once every replica runs this one).
--
-- The plan, the lease ids, the result and the commit are qc_pull_v2's (see its file): the owned
-- partitions in partition order from delivered_offset, one range lease per partition, 'leases'
-- null when redelivery work is due (the client then pulls in a transaction), 'starved' when the
-- lease ids ran out. Lease expiries come from clock_timestamp().
CREATE OR REPLACE FUNCTION qc_pull_v3(
    p_group_id     text,
    p_member_id    text,
    p_topic_id     text,
    p_limit        integer,
    p_async_commit boolean,
    p_lease_ids    text[]
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_pulled     jsonb := qc_pull_state_v2(p_group_id, p_member_id, p_topic_id, p_limit, p_async_commit);
    v_ids        integer := coalesce(cardinality(p_lease_ids), 0);
    v_budget     bigint;
    v_owned      record;
    v_count      bigint;
    v_partitions integer[] := '{}';
    v_first      bigint[] := '{}';
    v_last       bigint[] := '{}';
    v_starved    boolean := false;
BEGIN
    IF v_pulled->'owned' IS NULL THEN
        RETURN v_pulled;
    END IF;
    IF EXISTS (SELECT 1 FROM group_fairness f WHERE f.group_id = p_group_id) THEN
        RETURN v_pulled || jsonb_build_object('leases', NULL, 'starved', false, 'fair', true);
    END IF;

    v_budget := least(p_limit, (v_pulled #>> '{settings,max_in_flight}')::bigint
                               - (v_pulled #>> '{state,in_flight}')::bigint);
    IF v_budget > 0 AND EXISTS (
        SELECT 1 FROM jsonb_array_elements(v_pulled->'owned') o
        WHERE v_pulled #> '{state,due_partitions}' @> jsonb_build_array(o->'partition')
    ) THEN
        RETURN v_pulled || jsonb_build_object('leases', NULL, 'starved', false);
    END IF;

    FOR v_owned IN
        SELECT o.partition, o.delivered_offset, o.next_offset
        FROM jsonb_to_recordset(v_pulled->'owned')
             AS o(partition integer, delivered_offset bigint, next_offset bigint)
        WHERE o.delivered_offset < o.next_offset
        ORDER BY o.partition
    LOOP
        EXIT WHEN v_budget <= 0;
        IF cardinality(v_partitions) = v_ids THEN
            v_starved := true;
            EXIT;
        END IF;
        v_count := least(v_owned.next_offset - v_owned.delivered_offset, v_budget);
        v_partitions := v_partitions || v_owned.partition;
        v_first := v_first || v_owned.delivered_offset;
        v_last := v_last || (v_owned.delivered_offset + v_count - 1);
        v_budget := v_budget - v_count;
    END LOOP;

    IF cardinality(v_partitions) > 0 THEN
        UPDATE group_partitions gp SET delivered_offset = v.last_offset + 1
        FROM unnest(v_partitions, v_last) AS v(partition, last_offset)
        WHERE gp.group_id = p_group_id AND gp.partition = v.partition;

        INSERT INTO group_leases (group_id, partition, lease_id, first_offset, last_offset,
                                  member_id, lease_until, acked, done, open_count)
        SELECT p_group_id, v.partition, v.lease_id, v.first_offset, v.last_offset, p_member_id,
               clock_timestamp() + (v_pulled #>> '{settings,ack_timeout_ms}')::integer
                       * interval '1 millisecond',
               repeat('0', (v.last_offset - v.first_offset + 1)::int)::varbit,
               repeat('0', (v.last_offset - v.first_offset + 1)::int)::varbit,
               (v.last_offset - v.first_offset + 1)::int
        FROM unnest(v_partitions, p_lease_ids[1:cardinality(v_partitions)], v_first, v_last)
             AS v(partition, lease_id, first_offset, last_offset);
    END IF;

    RETURN v_pulled || jsonb_build_object(
        'leases', (
            SELECT coalesce(jsonb_agg(jsonb_build_array(
                       v.partition, v.lease_id, v.first_offset, v.last_offset)
                       ORDER BY v.partition), '[]'::jsonb)
            FROM unnest(v_partitions, p_lease_ids[1:cardinality(v_partitions)], v_first, v_last)
                 AS v(partition, lease_id, first_offset, last_offset)),
        'starved', v_starved);
END;
$$;
