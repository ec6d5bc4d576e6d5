-- Fair scheduling (docs/fair-scheduling.md): runtime configuration per environment, Lua hooks of
-- topics and groups, fair groups and their deficit-round-robin state, and the scheduling metadata
-- of dead letters. Every table is new and every column added is nullable: nothing that exists
-- changes meaning, and a group without a group_fairness row delivers exactly as before.

-- A persisted key-value store per environment (Fila's runtime configuration), e.g.
-- throttle.<key>.rate and throttle.<key>.burst.
CREATE TABLE runtime_config (
    environment_id text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    key            text        NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    value          text        NOT NULL CHECK (length(value) <= 4096),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, key)
);

-- A topic's onEnqueue hook (Lua source, compiled when saved) and how often it failed.
CREATE TABLE topic_hooks (
    topic_id   text        PRIMARY KEY REFERENCES topics (id) ON DELETE CASCADE,
    on_enqueue text        NOT NULL,
    errors     bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A group's onFailure hook and how often it failed.
CREATE TABLE group_hooks (
    group_id   text        PRIMARY KEY REFERENCES consumer_groups (id) ON DELETE CASCADE,
    on_failure text        NOT NULL,
    errors     bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A fair group. enabled = false: fairness was turned off while deliveries above a partition's
-- delivered_offset were still out; its pulls stay on the fair path (in offset order) until
-- every partition has caught up, then the row goes and pulls take the one-statement path again.
CREATE TABLE group_fairness (
    group_id       text    PRIMARY KEY REFERENCES consumer_groups (id) ON DELETE CASCADE,
    enabled        boolean NOT NULL DEFAULT true,
    weights        jsonb   NOT NULL DEFAULT '{}',
    default_weight integer NOT NULL DEFAULT 1 CHECK (default_weight BETWEEN 1 AND 1000),
    quantum        integer NOT NULL DEFAULT 1 CHECK (quantum BETWEEN 1 AND 1000)
);

-- Deficit round robin per fair group and partition: each active fairness key's deficit and its
-- place in the round (turn, ascending). PostgreSQL is the sequencer: a fair pull holds the
-- partition's group_partitions row lock while it reads and rewrites these rows.
CREATE TABLE fair_deficits (
    group_id     text    NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    partition    integer NOT NULL,
    fairness_key text    NOT NULL,
    deficit      bigint  NOT NULL,
    turn         integer NOT NULL,
    PRIMARY KEY (group_id, partition, fairness_key)
);

-- A dead letter keeps the scheduling metadata of its message (inspect shows it; a replay after
-- retention dropped the message is read from this copy).
ALTER TABLE dead_letters
    ADD COLUMN fairness_key  text,
    ADD COLUMN throttle_keys jsonb,
    ADD COLUMN weight        integer;
