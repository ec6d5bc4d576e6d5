-- A usable invitation (not accepted, revoked or expired) with what its page shows.
SELECT i.id, i.organisation_id, o.name AS organisation_name, i.email, i.role, i.expires_at,
       inviter.email AS invited_by, (invitee.id IS NOT NULL) AS has_account
FROM invitations i
JOIN organisations o ON o.id = i.organisation_id
LEFT JOIN users inviter ON inviter.id = i.invited_by
LEFT JOIN users invitee ON lower(invitee.email) = lower(i.email)
WHERE i.token_sha256 = %(token_sha256)s
  AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()
