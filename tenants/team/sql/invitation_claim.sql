-- Valid once: the first claim of a usable invitation wins, every later one finds no row.
UPDATE invitations SET accepted_at = now()
WHERE token_sha256 = %(token_sha256)s
  AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()
RETURNING id, organisation_id, email, role
