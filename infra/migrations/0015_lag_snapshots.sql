-- Consumer lag snapshots and the lag analytics job's output (docs/lag-analytics.md).
--
-- No foreign keys to consumer_groups or topics, on purpose: deleting a group (an API request)
-- would otherwise cascade into a week of per-minute rows per partition in the same transaction.
-- Rows of deleted groups are never read (the API resolves a group by name to its current id, and
-- a re-created group gets a new id) and age out with the purge task.

-- One row per (group, partition, minute), written by the snapshot task every minute in one
-- INSERT … SELECT; taken_at is truncated to the minute so a second run in the same minute
-- inserts nothing (ON CONFLICT DO NOTHING on the primary key).
CREATE TABLE lag_snapshots (
    group_id         text        NOT NULL,
    taken_at         timestamptz NOT NULL,
    partition        integer     NOT NULL,
    environment_id   text        NOT NULL,
    topic_id         text        NOT NULL,
    committed_offset bigint      NOT NULL,
    high_watermark   bigint      NOT NULL,  -- the partition's next_offset
    lag              bigint      NOT NULL CHECK (lag >= 0),
    -- group first, then time: a group's series over a time range is one index range scan.
    PRIMARY KEY (group_id, taken_at, partition)
);
-- The job's window read (every group, a few minutes) and the purge by age.
CREATE INDEX lag_snapshots_taken_at_idx ON lag_snapshots (taken_at);

-- The job's output: per group and time bucket, total lag at the end of the bucket, consume and
-- produce rates (messages/s) and the estimated time to drain. A re-run over the same window
-- upserts on the primary key, so it replaces its rows instead of adding more. NULL rates: no
-- usable step in the bucket (first snapshot, offset seek or reset); NULL time to drain: lag
-- left and not draining (consume rate not above produce rate, or unknown).
CREATE TABLE lag_series (
    group_id        text             NOT NULL,
    bucket_s        integer          NOT NULL CHECK (bucket_s > 0),
    bucket_start    timestamptz      NOT NULL,
    environment_id  text             NOT NULL,
    topic_id        text             NOT NULL,
    partitions      integer          NOT NULL,  -- partitions with a snapshot in the bucket
    lag             bigint           NOT NULL CHECK (lag >= 0),
    consume_rate    double precision CHECK (consume_rate >= 0),
    produce_rate    double precision CHECK (produce_rate >= 0),
    time_to_drain_s double precision CHECK (time_to_drain_s >= 0),
    computed_at     timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, bucket_s, bucket_start)
);
CREATE INDEX lag_series_bucket_start_idx ON lag_series (bucket_start);
