UPDATE memberships SET role = %(role)s
WHERE organisation_id = %(organisation_id)s AND user_id = %(user_id)s
