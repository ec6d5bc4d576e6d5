-- Valid once: the first claim of a live link wins.
UPDATE password_resets SET used_at = now()
WHERE token_sha256 = %(token_sha256)s AND used_at IS NULL AND expires_at > now()
RETURNING user_id
