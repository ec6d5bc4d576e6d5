-- The caller always passes a fresh secret; it is kept only on creation or when asked to rotate,
-- so the row returned holds that secret exactly when it is new.
INSERT INTO alert_endpoints (environment_id, url, secret) VALUES (%(environment_id)s, %(url)s, %(secret)s)
ON CONFLICT (environment_id) DO UPDATE SET
    url = EXCLUDED.url,
    secret = CASE WHEN %(rotate)s THEN EXCLUDED.secret ELSE alert_endpoints.secret END,
    secret_created_at = CASE WHEN %(rotate)s THEN now() ELSE alert_endpoints.secret_created_at END,
    updated_at = now()
RETURNING environment_id, url, secret, created_at, updated_at, secret_created_at
