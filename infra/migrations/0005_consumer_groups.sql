-- Consumer groups: configuration, membership (generation + sticky ownership), committed offsets.

CREATE TABLE consumer_groups (
    id                text PRIMARY KEY,
    environment_id    text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    topic_id          text        NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    name              text        NOT NULL,
    start_from        text        NOT NULL DEFAULT 'latest' CHECK (start_from IN ('earliest', 'latest')),
    ack_timeout_ms    integer     NOT NULL DEFAULT 30000 CHECK (ack_timeout_ms BETWEEN 1000 AND 43200000),
    max_in_flight     integer     NOT NULL DEFAULT 1000 CHECK (max_in_flight BETWEEN 1 AND 100000),
    max_retries       integer     NOT NULL DEFAULT 5 CHECK (max_retries BETWEEN 0 AND 1000),
    retry_delay_ms    integer     NOT NULL DEFAULT 30000 CHECK (retry_delay_ms BETWEEN 0 AND 86400000),
    alert_threshold   integer     CHECK (alert_threshold > 0),
    session_timeout_ms integer    NOT NULL DEFAULT 30000 CHECK (session_timeout_ms BETWEEN 1000 AND 600000),
    generation        bigint      NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic_id, name)
);
CREATE INDEX consumer_groups_environment_idx ON consumer_groups (environment_id);

CREATE TABLE group_members (
    id                 text PRIMARY KEY,
    group_id           text        NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    client_id          text        NOT NULL DEFAULT '',
    session_timeout_ms integer     NOT NULL,
    generation         bigint      NOT NULL,
    joined_at          timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX group_members_group_idx ON group_members (group_id);

-- Per group and partition: its owner in the current generation and the committed offset
-- (the lowest offset not yet done).
CREATE TABLE group_partitions (
    group_id         text    NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    partition        integer NOT NULL,
    owner_member_id  text    REFERENCES group_members (id) ON DELETE SET NULL,
    committed_offset bigint  NOT NULL,
    -- The next offset never delivered to this group: everything below it is either done or
    -- has a row in group_deliveries.
    delivered_offset bigint  NOT NULL,
    PRIMARY KEY (group_id, partition)
);

-- Messages between committed_offset and delivered_offset that are not simply done: leased to a
-- member, waiting for a retry, or acked out of order. Rows below committed_offset are deleted.
CREATE TABLE group_deliveries (
    group_id           text        NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    partition          integer     NOT NULL,
    "offset"           bigint      NOT NULL,
    state              text        NOT NULL CHECK (state IN ('leased', 'retry', 'acked', 'dead')),
    attempt            integer     NOT NULL,
    ack_id             text        UNIQUE,
    member_id          text,
    lease_until        timestamptz,
    available_at       timestamptz,
    last_error         text,
    first_delivered_at timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, partition, "offset")
);
CREATE INDEX group_deliveries_leases_idx ON group_deliveries (group_id, lease_until) WHERE state = 'leased';
CREATE INDEX group_deliveries_retry_idx ON group_deliveries (group_id, available_at) WHERE state = 'retry';

-- The dead-letter store: a copy of each message that exhausted its retries.
CREATE TABLE dead_letters (
    id                 text PRIMARY KEY,
    group_id           text        NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    partition          integer     NOT NULL,
    "offset"           bigint      NOT NULL,
    message_key        bytea,
    headers            jsonb       NOT NULL DEFAULT '{}',
    value              bytea       NOT NULL,
    published_at_ms    bigint      NOT NULL,
    error              text        NOT NULL DEFAULT '',
    attempts           integer     NOT NULL,
    first_delivered_at timestamptz NOT NULL,
    dead_at            timestamptz NOT NULL DEFAULT now(),
    replayed_at        timestamptz,
    UNIQUE (group_id, partition, "offset")
);
