UPDATE consumer_groups SET dlq_alert_raised_at = now() WHERE id = %(group_id)s
