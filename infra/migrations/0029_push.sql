-- Push groups: a group that delivers to an HTTPS endpoint instead of to members that pull
-- (docs/push.md). One row per push group; none for an ordinary group.
CREATE TABLE group_push (
    group_id          text PRIMARY KEY REFERENCES consumer_groups (id) ON DELETE CASCADE,
    endpoint          text        NOT NULL CHECK (length(endpoint) <= 2048),
    max_in_flight     integer     NOT NULL DEFAULT 10 CHECK (max_in_flight BETWEEN 1 AND 1000),
    timeout_ms        integer     NOT NULL DEFAULT 30000 CHECK (timeout_ms BETWEEN 1000 AND 600000),
    ordered           boolean     NOT NULL DEFAULT false,
    -- The signing secret as core.sealed stores it (sealed with QUEUECORE_SECRETS_KEY, bound to the
    -- group id), and what GET shows of it.
    secret            text        NOT NULL,
    secret_hint       text        NOT NULL,
    secret_created_at timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- The recent failed pushes of a group, for its console page: each pusher writes one row per failed
-- attempt and keeps the newest few per group.
CREATE TABLE push_failures (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_id      text        NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    message_id    text        NOT NULL,
    attempt       integer     NOT NULL,
    status_code   integer,
    error         text        NOT NULL,
    dead_lettered boolean     NOT NULL DEFAULT false,
    failed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_failures_group_idx ON push_failures (group_id, id DESC);

-- The members of a push group are its pushers; REST members cannot join one (409 PUSH_GROUP).
ALTER TABLE group_members ADD COLUMN pusher boolean NOT NULL DEFAULT false;
