-- The installation's identity: one row, written once.
CREATE TABLE instance (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    instance_id text        NOT NULL DEFAULT 'qc_' || replace(gen_random_uuid()::text, '-', ''),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO instance DEFAULT VALUES;
