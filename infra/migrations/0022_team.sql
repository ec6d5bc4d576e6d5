-- Teams: invitations by email, password resets, and each organisation's audit log
-- (tenants/team/). Tokens are stored as SHA-256 hashes only, like session tokens.

CREATE TABLE invitations (
    id              text PRIMARY KEY,
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    email           text        NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
    role            text        NOT NULL CHECK (role IN ('owner', 'admin', 'developer', 'viewer')),
    token_sha256    bytea       NOT NULL UNIQUE,
    invited_by      text        REFERENCES users (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    accepted_at     timestamptz,
    accepted_by     text        REFERENCES users (id) ON DELETE SET NULL,
    revoked_at      timestamptz
);
CREATE INDEX invitations_pending_idx ON invitations (organisation_id, lower(email))
    WHERE accepted_at IS NULL AND revoked_at IS NULL;

CREATE TABLE password_resets (
    token_sha256 bytea PRIMARY KEY,
    user_id      text        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX password_resets_user_idx ON password_resets (user_id);

CREATE TABLE audit_events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    at              timestamptz NOT NULL DEFAULT now(),
    actor_user_id   text        REFERENCES users (id) ON DELETE SET NULL,
    actor           text        NOT NULL,  -- as shown: an email, an API key's id, the operator
    action          text        NOT NULL,  -- member.invited, key.created, topic.updated, …
    target          text        NOT NULL DEFAULT '',
    details         jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_events_organisation_idx ON audit_events (organisation_id, id DESC);
