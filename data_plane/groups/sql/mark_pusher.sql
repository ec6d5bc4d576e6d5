UPDATE group_members SET pusher = true WHERE id = %(id)s
