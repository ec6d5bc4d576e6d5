-- Usage metering and its monthly rollup (docs/billing.md, docs/decisions.md §27).

-- One row per environment and UTC hour. The request counters are written by the API processes'
-- meters (billing.meter): each adds what it counted since its last flush, every few seconds, in
-- one additive upsert, so any number of processes add into the same row. The storage columns are
-- written by the storage sampler task (billing.sample_storage, every 5 min): one sample per slot
-- (storage_sampled_at guards against a repeated run), the hour's average is
-- storage_bytes_sum / storage_samples.
CREATE TABLE usage_hourly (
    environment_id     text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    hour               timestamptz NOT NULL CHECK (extract(epoch FROM hour)::bigint % 3600 = 0),
    messages_in        bigint      NOT NULL DEFAULT 0 CHECK (messages_in >= 0),
    bytes_in           bigint      NOT NULL DEFAULT 0 CHECK (bytes_in >= 0),
    messages_out       bigint      NOT NULL DEFAULT 0 CHECK (messages_out >= 0),
    bytes_out          bigint      NOT NULL DEFAULT 0 CHECK (bytes_out >= 0),
    publish_requests   bigint      NOT NULL DEFAULT 0 CHECK (publish_requests >= 0),
    consume_requests   bigint      NOT NULL DEFAULT 0 CHECK (consume_requests >= 0),
    admin_requests     bigint      NOT NULL DEFAULT 0 CHECK (admin_requests >= 0),
    storage_bytes_sum  bigint      NOT NULL DEFAULT 0 CHECK (storage_bytes_sum >= 0),
    storage_bytes_max  bigint      NOT NULL DEFAULT 0 CHECK (storage_bytes_max >= 0),
    storage_samples    integer     NOT NULL DEFAULT 0 CHECK (storage_samples >= 0),
    storage_sampled_at timestamptz,  -- the sampler slot of the last sample added
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, hour)
);
-- The aggregation job's month read and its "anything to do?" check.
CREATE INDEX usage_hourly_hour_idx ON usage_hourly (hour);

-- The usage aggregation job's output (spark_pipelines.usage_aggregation): per project and
-- calendar month (UTC), the raw totals, the billable quantities and an estimated amount at list
-- prices (billing.plans). A re-run replaces the month's row (upsert on the primary key).
CREATE TABLE usage_monthly (
    project_id             text             NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    month                  date             NOT NULL CHECK (extract(day FROM month) = 1),
    organisation_id        text             NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    tier                   text             NOT NULL,  -- the organisation's tier when computed
    messages_in            bigint           NOT NULL CHECK (messages_in >= 0),
    messages_out           bigint           NOT NULL CHECK (messages_out >= 0),
    bytes_in               bigint           NOT NULL CHECK (bytes_in >= 0),
    bytes_out              bigint           NOT NULL CHECK (bytes_out >= 0),
    publish_requests       bigint           NOT NULL CHECK (publish_requests >= 0),
    consume_requests       bigint           NOT NULL CHECK (consume_requests >= 0),
    admin_requests         bigint           NOT NULL CHECK (admin_requests >= 0),
    storage_byte_hours     double precision NOT NULL CHECK (storage_byte_hours >= 0),
    -- Billable quantities: decimal units (1 GB = 10^9 bytes), GB-months over the month's hours.
    messages_in_millions   double precision NOT NULL,
    messages_out_millions  double precision NOT NULL,
    gb_in                  double precision NOT NULL,
    gb_out                 double precision NOT NULL,
    storage_gb_months      double precision NOT NULL,
    requests               bigint           NOT NULL,
    estimated_amount_cents bigint           NOT NULL CHECK (estimated_amount_cents >= 0),
    computed_at            timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, month)
);
CREATE INDEX usage_monthly_organisation_idx ON usage_monthly (organisation_id, month);
