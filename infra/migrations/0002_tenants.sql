-- Tenancy: organisations → projects → environments; users and memberships; API keys; sessions.

CREATE TABLE organisations (
    id            text PRIMARY KEY,
    name          text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    tier          text        NOT NULL DEFAULT 'developer' CHECK (tier IN ('developer', 'pro', 'enterprise')),
    custom_limits jsonb,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            text PRIMARY KEY,
    email         text        NOT NULL,
    password_hash text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE memberships (
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    user_id         text        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role            text        NOT NULL CHECK (role IN ('owner', 'admin', 'developer', 'viewer')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organisation_id, user_id)
);
CREATE INDEX memberships_user_idx ON memberships (user_id);

CREATE TABLE projects (
    id              text PRIMARY KEY,
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organisation_id, name)
);

CREATE TABLE environments (
    id              text PRIMARY KEY,
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    project_id      text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name            text        NOT NULL CHECK (name IN ('development', 'staging', 'production')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

CREATE TABLE api_keys (
    id              text PRIMARY KEY,
    organisation_id text        NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    project_id      text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    environment_id  text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    name            text        NOT NULL DEFAULT '',
    secret_sha256   bytea       NOT NULL UNIQUE,
    hint            text        NOT NULL,
    scopes          text[]      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    revoked_at      timestamptz,
    last_used_at    timestamptz
);
CREATE INDEX api_keys_environment_idx ON api_keys (environment_id) WHERE revoked_at IS NULL;

CREATE TABLE user_sessions (
    token_sha256 bytea PRIMARY KEY,
    user_id      text        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX user_sessions_user_idx ON user_sessions (user_id);
