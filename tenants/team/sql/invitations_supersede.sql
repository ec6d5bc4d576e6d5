-- A new invitation to the same address replaces the pending one: its link stops working.
UPDATE invitations SET revoked_at = now()
WHERE organisation_id = %(organisation_id)s AND lower(email) = lower(%(email)s)
  AND accepted_at IS NULL AND revoked_at IS NULL
