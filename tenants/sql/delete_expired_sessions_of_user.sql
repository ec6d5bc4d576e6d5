DELETE FROM user_sessions WHERE user_id = %(user_id)s AND expires_at <= now()
