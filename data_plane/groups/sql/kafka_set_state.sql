-- A Kafka group's state (Stable once the leader's assignments are in, Empty once all left).
UPDATE kafka_groups SET state = %(state)s, updated_at = now() WHERE id = %(group_id)s
