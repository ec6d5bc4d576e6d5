-- A group's hook failures: its topic's onEnqueue and its own onFailure.
SELECT coalesce((SELECT errors FROM topic_hooks WHERE topic_id = %(topic_id)s), 0)
     + coalesce((SELECT errors FROM group_hooks WHERE group_id = %(group_id)s), 0) AS errors
