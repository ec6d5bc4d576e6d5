"""Every SQL statement of the tenancy store, named."""

INSERT_ORGANISATION = """
INSERT INTO organisations (id, name, tier, custom_limits) VALUES (%(id)s, %(name)s, %(tier)s, %(custom_limits)s)
RETURNING id, name, tier, custom_limits, created_at
"""

SELECT_ORGANISATION = """
SELECT id, name, tier, custom_limits, created_at FROM organisations WHERE id = %(id)s
"""

LIST_ORGANISATIONS = """
SELECT o.id, o.name, o.tier, o.custom_limits, o.created_at,
       (SELECT count(*) FROM projects p WHERE p.organisation_id = o.id) AS project_count
FROM organisations o ORDER BY o.created_at, o.id
"""

UPDATE_TIER = """
UPDATE organisations SET tier = %(tier)s, custom_limits = %(custom_limits)s WHERE id = %(id)s
RETURNING id, name, tier, custom_limits, created_at
"""

INSERT_USER = """
INSERT INTO users (id, email, password_hash) VALUES (%(id)s, %(email)s, %(password_hash)s)
ON CONFLICT DO NOTHING
RETURNING id, email, created_at
"""

SELECT_USER_BY_EMAIL = """
SELECT id, email, password_hash FROM users WHERE lower(email) = lower(%(email)s)
"""

INSERT_MEMBERSHIP = """
INSERT INTO memberships (organisation_id, user_id, role) VALUES (%(organisation_id)s, %(user_id)s, %(role)s)
"""

LIST_MEMBERSHIPS_OF_USER = """
SELECT m.organisation_id, m.role, o.name AS organisation_name
FROM memberships m JOIN organisations o ON o.id = m.organisation_id
WHERE m.user_id = %(user_id)s ORDER BY o.created_at
"""

INSERT_PROJECT = """
INSERT INTO projects (id, organisation_id, name) VALUES (%(id)s, %(organisation_id)s, %(name)s)
ON CONFLICT (organisation_id, name) DO NOTHING
RETURNING id, organisation_id, name, created_at
"""

INSERT_ENVIRONMENT = """
INSERT INTO environments (id, organisation_id, project_id, name)
VALUES (%(id)s, %(organisation_id)s, %(project_id)s, %(name)s)
RETURNING id, organisation_id, project_id, name, created_at
"""

LIST_PROJECTS = """
SELECT id, organisation_id, name, created_at FROM projects WHERE organisation_id = %(organisation_id)s ORDER BY created_at, id
"""

LIST_ENVIRONMENTS = """
SELECT id, organisation_id, project_id, name, created_at FROM environments WHERE project_id = %(project_id)s
ORDER BY array_position(ARRAY['development', 'staging', 'production'], name)
"""

LOCK_ENVIRONMENT = """
SELECT e.id, e.organisation_id, e.project_id, e.name FROM environments e WHERE e.id = %(id)s FOR UPDATE
"""

COUNT_ACTIVE_KEYS = """
SELECT count(*) AS n FROM api_keys
WHERE environment_id = %(environment_id)s AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
"""

INSERT_KEY = """
INSERT INTO api_keys (id, organisation_id, project_id, environment_id, name, secret_sha256, hint, scopes, expires_at)
VALUES (%(id)s, %(organisation_id)s, %(project_id)s, %(environment_id)s, %(name)s, %(secret_sha256)s, %(hint)s,
        %(scopes)s, %(expires_at)s)
RETURNING id, environment_id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at
"""

LIST_KEYS = """
SELECT id, environment_id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at
FROM api_keys WHERE environment_id = %(environment_id)s AND (%(include_revoked)s OR revoked_at IS NULL)
ORDER BY created_at, id
"""

REVOKE_KEY = """
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s AND environment_id = %(environment_id)s
RETURNING id, environment_id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at
"""

SELECT_KEY_FOR_AUTH = """
SELECT k.id AS key_id, k.secret_sha256, k.scopes, k.expires_at, k.revoked_at,
       k.organisation_id, k.project_id, k.environment_id, e.name AS environment
FROM api_keys k JOIN environments e ON e.id = k.environment_id
WHERE k.secret_sha256 = %(secret_sha256)s
"""

TOUCH_KEYS = """
UPDATE api_keys k SET last_used_at = greatest(k.last_used_at, v.used_at)
FROM unnest(%(ids)s::text[], %(used_at)s::timestamptz[]) AS v(id, used_at)
WHERE k.id = v.id
"""

INSERT_SESSION = """
INSERT INTO user_sessions (token_sha256, user_id, csrf_token, expires_at)
VALUES (%(token_sha256)s, %(user_id)s, %(csrf_token)s, now() + make_interval(secs => %(ttl_s)s))
"""

SELECT_SESSION = """
SELECT s.user_id, s.csrf_token, s.expires_at, u.email FROM user_sessions s JOIN users u ON u.id = s.user_id
WHERE s.token_sha256 = %(token_sha256)s AND s.expires_at > now()
"""

DELETE_SESSION = """
DELETE FROM user_sessions WHERE token_sha256 = %(token_sha256)s
"""

DELETE_EXPIRED_SESSIONS_OF_USER = """
DELETE FROM user_sessions WHERE user_id = %(user_id)s AND expires_at <= now()
"""

# The environment as a member of its organisation sees it: no row for anyone else.
SELECT_ENVIRONMENT_ACCESS = """
SELECT e.id, e.organisation_id, e.project_id, e.name, e.created_at, m.role
FROM environments e
JOIN memberships m ON m.organisation_id = e.organisation_id AND m.user_id = %(user_id)s
WHERE e.id = %(environment_id)s
"""
