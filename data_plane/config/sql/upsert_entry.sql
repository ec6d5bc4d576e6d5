-- Set a key of an environment's runtime configuration (created or replaced).
INSERT INTO runtime_config (environment_id, key, value) VALUES (%(environment_id)s, %(key)s, %(value)s)
ON CONFLICT (environment_id, key) DO UPDATE SET value = excluded.value, updated_at = now()
RETURNING key, value
