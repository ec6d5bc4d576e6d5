UPDATE invitations SET accepted_by = %(user_id)s WHERE id = %(id)s
