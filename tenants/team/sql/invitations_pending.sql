SELECT i.id, i.organisation_id, i.email, i.role, i.created_at, i.expires_at, u.email AS invited_by
FROM invitations i LEFT JOIN users u ON u.id = i.invited_by
WHERE i.organisation_id = %(organisation_id)s AND i.accepted_at IS NULL AND i.revoked_at IS NULL
  AND i.expires_at > now()
ORDER BY i.created_at, i.id
