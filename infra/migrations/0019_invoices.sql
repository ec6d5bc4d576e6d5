-- Invoices and credit notes (docs/billing.md, "Invoices").

-- The last number given per series ('QC' invoices, 'CN' credit notes) and calendar year of issue.
-- Incremented in the issuing transaction: its row lock orders concurrent issuers, and a rolled
-- back issue gives its number back, so numbers have no gaps.
CREATE TABLE invoice_counters (
    series        text    NOT NULL CHECK (series ~ '^[A-Z]{2,4}$'),
    year          integer NOT NULL CHECK (year BETWEEN 2000 AND 9999),
    last_sequence integer NOT NULL CHECK (last_sequence >= 1),
    PRIMARY KEY (series, year)
);

-- One row per invoice or credit note. No foreign key to the organisation: an issued document
-- outlives its tenant (deleting an organisation leaves its invoices), and it keeps the names it
-- was issued with. Inserted as 'draft' with its lines in one transaction, then set 'issued' in the
-- same transaction: from then on the triggers below refuse any change.
CREATE TABLE invoices (
    id                  text        PRIMARY KEY,
    number              text        NOT NULL UNIQUE,
    kind                text        NOT NULL CHECK (kind IN ('invoice', 'credit_note')),
    series              text        NOT NULL,
    year                integer     NOT NULL,
    sequence            integer     NOT NULL CHECK (sequence >= 1),
    organisation_id     text        NOT NULL,
    organisation_name   text        NOT NULL,
    tier                text        NOT NULL,
    period_start        date        NOT NULL CHECK (extract(day FROM period_start) = 1),
    period_end          date        NOT NULL CHECK (period_end > period_start),
    currency            text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    total_cents         bigint      NOT NULL,
    credited_invoice_id text        REFERENCES invoices (id),
    reason              text        CHECK (reason IS NULL OR length(reason) BETWEEN 1 AND 500),
    status              text        NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'issued')),
    issued_at           timestamptz,
    UNIQUE (series, year, sequence),
    CHECK ((kind = 'credit_note') = (credited_invoice_id IS NOT NULL)),
    CHECK ((kind = 'invoice' AND total_cents >= 0) OR (kind = 'credit_note' AND total_cents < 0)),
    CHECK ((status = 'issued') = (issued_at IS NOT NULL))
);
-- One invoice per organisation and month: re-running the month finds it instead of a second one.
CREATE UNIQUE INDEX invoices_one_per_period ON invoices (organisation_id, period_start)
    WHERE kind = 'invoice';
CREATE INDEX invoices_organisation_idx ON invoices (organisation_id, period_start DESC, number);

-- The lines: the base price, one per project and environment with usage, or a credit (negative).
-- The usage columns are the month's quantities of that environment (what the amount is about).
CREATE TABLE invoice_lines (
    invoice_id        text    NOT NULL REFERENCES invoices (id),
    position          integer NOT NULL CHECK (position >= 1),
    kind              text    NOT NULL CHECK (kind IN ('base', 'usage', 'credit')),
    description       text    NOT NULL,
    project_id        text,
    project_name      text,
    environment_id    text,
    environment_name  text,
    messages_in       bigint  NOT NULL DEFAULT 0,
    messages_out      bigint  NOT NULL DEFAULT 0,
    bytes_in          bigint  NOT NULL DEFAULT 0,
    bytes_out         bigint  NOT NULL DEFAULT 0,
    requests          bigint  NOT NULL DEFAULT 0,
    storage_gb_months numeric NOT NULL DEFAULT 0,
    amount_cents      bigint  NOT NULL,
    PRIMARY KEY (invoice_id, position)
);

-- An issued invoice or credit note is never changed or deleted, nor are its lines: the triggers
-- that refuse it are created with their function, billing/functions/qc_invoice_guard.sql (stored
-- functions live there, applied after every migration).
