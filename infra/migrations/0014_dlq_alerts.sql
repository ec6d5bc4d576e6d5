-- DLQ alert webhooks (docs/decisions.md §24).
--
-- An environment has at most one alert endpoint. When a group's dead-letter depth reaches its
-- alertThreshold, the check (a beat task) marks the group's alert raised and records the webhook
-- in the outbox in one transaction, then queues its delivery; the alert re-arms when the depth
-- falls back below the threshold.

-- The signing secret is kept in clear: an HMAC signature needs the key itself, not a hash of
-- it. It is returned only by the request that made it and never logged.
CREATE TABLE alert_endpoints (
    environment_id    text PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    url               text        NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    secret            text        NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    secret_created_at timestamptz NOT NULL DEFAULT now()
);

-- When the group's alert was raised; NULL while it is armed (depth below the threshold, or no
-- threshold). A nullable column added without a default rewrites nothing.
ALTER TABLE consumer_groups ADD COLUMN dlq_alert_raised_at timestamptz;

-- The webhook outbox: one row per event to deliver, written in the transaction that decided to
-- send it. Its id (whd_…) is the QueueCore-Delivery header, the same on every attempt, so a
-- receiver can drop repeats. The body sent is this payload, serialised the same way each time.
CREATE TABLE webhook_deliveries (
    id               text PRIMARY KEY,
    environment_id   text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    event            text        NOT NULL,
    payload          jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- When the next attempt is due: a pending row long past it lost its queued task (a broker
    -- outage at enqueue, say), and the check queues it again.
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz
);
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_environment_idx ON webhook_deliveries (environment_id, created_at);
