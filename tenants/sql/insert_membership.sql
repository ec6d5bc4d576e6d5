INSERT INTO memberships (organisation_id, user_id, role) VALUES (%(organisation_id)s, %(user_id)s, %(role)s)
