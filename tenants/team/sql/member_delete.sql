DELETE FROM memberships WHERE organisation_id = %(organisation_id)s AND user_id = %(user_id)s
