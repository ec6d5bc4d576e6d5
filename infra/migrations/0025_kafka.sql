-- The Kafka protocol listener's state: idempotent producers' ids, classic consumer groups
-- (membership and the rebalance in progress), and Kafka groups' committed offsets, which live
-- in consumer_groups and group_partitions so the REST API lists them with their lag.

CREATE SEQUENCE kafka_producer_ids;

-- A consumer group of Kafka clients (the classic protocol), named within one environment. Its
-- committed offsets are per topic, in consumer_groups rows with protocol 'kafka'.
CREATE TABLE kafka_groups (
    id                 text PRIMARY KEY,
    environment_id     text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    name               text        NOT NULL,
    state              text        NOT NULL DEFAULT 'Empty'
        CHECK (state IN ('Empty', 'PreparingRebalance', 'CompletingRebalance', 'Stable')),
    generation         integer     NOT NULL DEFAULT 0,
    protocol_type      text        NOT NULL DEFAULT '',
    protocol_name      text,
    leader_id          text,
    rebalance_deadline timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (environment_id, name)
);

CREATE TABLE kafka_group_members (
    group_id             text        NOT NULL REFERENCES kafka_groups (id) ON DELETE CASCADE,
    member_id            text        NOT NULL,
    group_instance_id    text,
    client_id            text        NOT NULL DEFAULT '',
    client_host          text        NOT NULL DEFAULT '',
    session_timeout_ms   integer     NOT NULL,
    rebalance_timeout_ms integer     NOT NULL,
    protocol_names       text[]      NOT NULL,
    protocol_metadata    bytea[]     NOT NULL,
    -- Joined the rebalance in progress (reset when one starts).
    joined               boolean     NOT NULL DEFAULT false,
    -- The generation whose JoinGroup answer is this member's (0: none yet).
    join_generation      integer     NOT NULL DEFAULT 0,
    assignment           bytea,
    last_heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, member_id)
);

ALTER TABLE consumer_groups ADD COLUMN protocol text NOT NULL DEFAULT 'rest'
    CHECK (protocol IN ('rest', 'kafka'));
-- A Kafka commit's metadata string; NULL where no Kafka client committed an offset.
ALTER TABLE group_partitions ADD COLUMN commit_metadata text;
