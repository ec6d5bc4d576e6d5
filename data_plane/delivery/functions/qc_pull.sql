-- qc_pull: the current definition, applied (CREATE OR REPLACE) after every migration.
--
-- A pull in one round trip (docs/decisions.md §15). With qc_pull_state (migration 0008) a pull
-- took two: the state, read inside the pull's transaction; then, once the client had planned the
-- fresh offsets and read their messages, the range leases with the COMMIT. When none of the
-- member's partitions has redelivery work due, the plan needs nothing the database does not know,
-- so this function makes it as well and records the leases. Called in autocommit mode it is the
-- whole transaction, its commit included; the client reads the messages afterwards.
--
-- The plan is the client's (data_plane/delivery/pulls.py, _take): the owned partitions in
-- partition order, each from its delivered_offset towards its next_offset, sharing the budget
-- least(p_limit, max_in_flight - in_flight) in that order; one range lease per partition, with the
-- columns and values of INSERT_RANGE_LEASES, and delivered_offset moved past it. The lease ids are
-- p_lease_ids in order: random base62 made by the client, since ack ids must not be guessable.
-- When the ids run out, the partitions left wait for the next pull and 'starved' says so.
--
-- Returns qc_pull_state's {settings, owned, state, blocks} (only {settings} when the member is
-- gone or its topic inactive: nothing locked, nothing leased) and
--   leases:  [[partition, lease_id, first_offset, last_offset], ...], the leases made, or null
--            when an owned partition has redelivery work due (expired leases, due retries) and the
--            budget is not spent: then nothing is leased and the client takes the transactional
--            path (this function with no lease ids, redeliveries and fresh offsets planned by the
--            client, the leases inserted with the COMMIT);
--   starved: whether fresh offsets were left for lack of lease ids.
-- With p_async_commit the commit does not wait for the WAL flush (qc_pull_state's set_config,
-- local to the transaction: in autocommit mode, to this statement's). The API passes false: a
-- lease a crash forgot would deliver its messages again as attempt 1 (docs/decisions.md §11);
-- benchmarks/pull_commit.py measures both.
--
-- Lease expiries come from clock_timestamp(), not now(): a pull that stalled (a slow or frozen
-- PostgreSQL) would otherwise stamp leases with its transaction's start and commit them expired.
CREATE OR REPLACE FUNCTION qc_pull(
    p_group_id     text,
    p_member_id    text,
    p_topic_id     text,
    p_limit        integer,
    p_async_commit boolean,
    p_lease_ids    text[]
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_pulled     jsonb := qc_pull_state(p_group_id, p_member_id, p_topic_id, p_limit, p_async_commit);
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
