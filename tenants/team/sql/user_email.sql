SELECT email FROM users WHERE id = %(user_id)s
