-- Topics, partitions, the segment block index, committed segment objects, idempotency keys.

CREATE TABLE topics (
    id              text PRIMARY KEY,
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    environment_id  text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    partitions      integer     NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
    retention_s     bigint      NOT NULL CHECK (retention_s > 0),
    delivery        text        NOT NULL CHECK (delivery IN ('exactly-once', 'at-least-once')),
    latency_class   text        NOT NULL DEFAULT 'express' CHECK (latency_class IN ('express', 'standard')),
    status          text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deleting')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
-- A deleted topic's name can be reused at once while its data is being cleaned up.
CREATE UNIQUE INDEX topics_environment_name_key ON topics (environment_id, name) WHERE status = 'active';
CREATE INDEX topics_environment_idx ON topics (environment_id);

-- One row per partition: the sequencer. next_offset is reserved under a row lock per flush;
-- start_offset is the earliest offset still retained.
CREATE TABLE partitions (
    topic_id     text    NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition    integer NOT NULL CHECK (partition >= 0),
    next_offset  bigint  NOT NULL DEFAULT 0,
    start_offset bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);

-- Segment objects whose blocks were committed (anything else in the bucket is an orphan).
CREATE TABLE segment_objects (
    object_key  text PRIMARY KEY,
    size_bytes  bigint      NOT NULL,
    block_count integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per (partition, flush): where a run of consecutive offsets lives.
CREATE TABLE segment_blocks (
    topic_id         text    NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition        integer NOT NULL,
    base_offset      bigint  NOT NULL,
    count            integer NOT NULL CHECK (count > 0),
    object_key       text    NOT NULL REFERENCES segment_objects (object_key),
    byte_offset      bigint  NOT NULL,
    byte_length      integer NOT NULL,
    min_timestamp_ms bigint  NOT NULL,
    max_timestamp_ms bigint  NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, partition, base_offset)
);
CREATE INDEX segment_blocks_object_idx ON segment_blocks (object_key);

-- Idempotent publish: a retried idempotencyKey returns the original offset.
CREATE TABLE idempotency_keys (
    topic_id        text        NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    idempotency_key text        NOT NULL,
    partition       integer     NOT NULL,
    "offset"        bigint      NOT NULL,
    published_at    timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (topic_id, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at);
