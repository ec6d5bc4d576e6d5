-- Someone who became a member since being invited keeps the role they have.
INSERT INTO memberships (organisation_id, user_id, role)
VALUES (%(organisation_id)s, %(user_id)s, %(role)s)
ON CONFLICT (organisation_id, user_id) DO NOTHING
