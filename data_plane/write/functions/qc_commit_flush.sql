-- qc_commit_flush: the current definition, applied (CREATE OR REPLACE) after every migration.
--
-- The segment writer's commit in one statement, so a flush costs one round trip to PostgreSQL
-- and holds its partition row locks only while the server runs it and flushes the WAL
-- (docs/decisions.md §8). Called in autocommit mode: the statement is the transaction, and any
-- exception it raises rolls everything back.
--
-- Blocks come as one JSON array of [topic_id, partition, count, byte_offset, byte_length,
-- min_timestamp_ms, max_timestamp_ms], one per (topic, partition) block of the segment; keys as
-- [block (1-based), key, position in the block, published_at_ms, expires_at_ms]. (JSON because
-- one text parameter costs the client far less to send than fourteen typed arrays.)
-- Raises SQLSTATE QC404 (DETAIL: comma-separated topic ids) when a topic is no longer active,
-- and QC409 (DETAIL: JSON array of [topic_id, key]) when a live key was committed meanwhile.
CREATE OR REPLACE FUNCTION qc_commit_flush(
    p_object_key text,
    p_size_bytes bigint,
    p_blocks     jsonb,
    p_keys       jsonb
) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_blocks       integer := jsonb_array_length(p_blocks);
    p_topic_ids    text[];
    p_partitions   integer[];
    p_counts       bigint[];
    p_byte_offsets bigint[];
    p_byte_lengths integer[];
    p_min_ts       bigint[];
    p_max_ts       bigint[];
    v_bases    bigint[];
    v_found    integer;
    v_missing  text;
    v_dupes    text;
    v_chunk    text := '';
    v_item     text;
BEGIN
    SELECT array_agg(b->>0 ORDER BY ord), array_agg((b->>1)::integer ORDER BY ord),
           array_agg((b->>2)::bigint ORDER BY ord), array_agg((b->>3)::bigint ORDER BY ord),
           array_agg((b->>4)::integer ORDER BY ord), array_agg((b->>5)::bigint ORDER BY ord),
           array_agg((b->>6)::bigint ORDER BY ord)
    INTO p_topic_ids, p_partitions, p_counts, p_byte_offsets, p_byte_lengths, p_min_ts, p_max_ts
    FROM jsonb_array_elements(p_blocks) WITH ORDINALITY AS e(b, ord);

    -- Partition rows are locked in (topic_id, partition) order, the one order every writer of
    -- every replica uses, so concurrent flushes never deadlock.
    WITH wanted AS (
        SELECT * FROM unnest(p_topic_ids, p_partitions, p_counts) WITH ORDINALITY
            AS w(topic_id, partition, n, ord)
    ), locked AS MATERIALIZED (
        SELECT p.topic_id, p.partition FROM partitions p
        JOIN wanted w ON w.topic_id = p.topic_id AND w.partition = p.partition
        JOIN topics t ON t.id = p.topic_id AND t.status = 'active'
        ORDER BY p.topic_id, p.partition
        FOR UPDATE OF p
    ), reserved AS (
        UPDATE partitions p SET next_offset = p.next_offset + w.n
        FROM locked l JOIN wanted w ON w.topic_id = l.topic_id AND w.partition = l.partition
        WHERE p.topic_id = l.topic_id AND p.partition = l.partition
        RETURNING w.ord, p.next_offset - w.n AS base_offset
    )
    SELECT array_agg(base_offset ORDER BY ord), count(*) INTO v_bases, v_found FROM reserved;

    IF v_found < v_blocks THEN
        SELECT string_agg(DISTINCT w.topic_id, ',') INTO v_missing
        FROM unnest(p_topic_ids) AS w(topic_id)
        WHERE NOT EXISTS (SELECT 1 FROM topics t WHERE t.id = w.topic_id AND t.status = 'active');
        RAISE EXCEPTION 'topics no longer active' USING ERRCODE = 'QC404', DETAIL = v_missing;
    END IF;

    IF jsonb_array_length(p_keys) > 0 THEN
        -- Keys go in sorted order so flushes racing on several keys wait in one order. An
        -- expired key is taken over; a live one is a duplicate and is not returned.
        WITH inserted AS (
            INSERT INTO idempotency_keys (topic_id, idempotency_key, partition, "offset",
                                          published_at, expires_at)
            SELECT p_topic_ids[(k->>0)::integer], k->>1, p_partitions[(k->>0)::integer],
                   v_bases[(k->>0)::integer] + (k->>2)::bigint,
                   to_timestamp((k->>3)::bigint / 1000.0), to_timestamp((k->>4)::bigint / 1000.0)
            FROM jsonb_array_elements(p_keys) AS k
            ORDER BY 1, 2
            ON CONFLICT (topic_id, idempotency_key) DO UPDATE
                SET partition = excluded.partition, "offset" = excluded."offset",
                    published_at = excluded.published_at, expires_at = excluded.expires_at
                WHERE idempotency_keys.expires_at <= now()
            RETURNING topic_id, idempotency_key
        )
        SELECT json_agg(json_build_array(p_topic_ids[(k->>0)::integer], k->>1))::text INTO v_dupes
        FROM jsonb_array_elements(p_keys) AS k
        WHERE NOT EXISTS (
            SELECT 1 FROM inserted i
            WHERE i.topic_id = p_topic_ids[(k->>0)::integer] AND i.idempotency_key = k->>1
        );
        IF v_dupes IS NOT NULL THEN
            RAISE EXCEPTION 'idempotency keys already committed'
                USING ERRCODE = 'QC409', DETAIL = v_dupes;
        END IF;
    END IF;

    INSERT INTO segment_objects (object_key, size_bytes, block_count)
    VALUES (p_object_key, p_size_bytes, v_blocks);

    INSERT INTO segment_blocks (topic_id, partition, base_offset, count, object_key, byte_offset,
                                byte_length, min_timestamp_ms, max_timestamp_ms)
    SELECT p_topic_ids[i], p_partitions[i], v_bases[i], p_counts[i], p_object_key,
           p_byte_offsets[i], p_byte_lengths[i], p_min_ts[i], p_max_ts[i]
    FROM generate_series(1, v_blocks) AS i;

    -- Wake readers: JSON arrays of [topic_id, partition, next_offset], each payload under
    -- PostgreSQL's 8000-byte limit.
    FOR i IN 1 .. v_blocks LOOP
        v_item := json_build_array(p_topic_ids[i], p_partitions[i], v_bases[i] + p_counts[i])::text;
        IF length(v_chunk) + length(v_item) + 2 > 7900 THEN
            PERFORM pg_notify('qc_publish', '[' || v_chunk || ']');
            v_chunk := '';
        END IF;
        v_chunk := CASE WHEN v_chunk = '' THEN v_item ELSE v_chunk || ',' || v_item END;
    END LOOP;
    IF v_chunk <> '' THEN
        PERFORM pg_notify('qc_publish', '[' || v_chunk || ']');
    END IF;

    RETURN QUERY SELECT unnest(v_bases);
END;
$$;
