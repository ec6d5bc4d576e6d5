SELECT key, value FROM runtime_config WHERE environment_id = %(environment_id)s AND key = %(key)s
