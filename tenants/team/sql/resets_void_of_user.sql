-- A new reset link (or a completed reset) makes every older link of the user useless.
UPDATE password_resets SET used_at = now() WHERE user_id = %(user_id)s AND used_at IS NULL
