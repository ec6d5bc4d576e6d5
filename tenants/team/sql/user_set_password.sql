UPDATE users SET password_hash = %(password_hash)s WHERE id = %(user_id)s
