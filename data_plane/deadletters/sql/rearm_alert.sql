UPDATE consumer_groups SET dlq_alert_raised_at = NULL WHERE id = %(group_id)s
