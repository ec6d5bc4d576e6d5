INSERT INTO invitations (id, organisation_id, email, role, token_sha256, invited_by, expires_at)
VALUES (%(id)s, %(organisation_id)s, %(email)s, %(role)s, %(token_sha256)s, %(invited_by)s,
        now() + make_interval(secs => %(ttl_s)s))
RETURNING id, organisation_id, email, role, created_at, expires_at
