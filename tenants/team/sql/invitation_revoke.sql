UPDATE invitations SET revoked_at = now()
WHERE id = %(id)s AND organisation_id = %(organisation_id)s
  AND accepted_at IS NULL AND revoked_at IS NULL
RETURNING id, organisation_id, email, role, created_at, expires_at
