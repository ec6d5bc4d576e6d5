-- A Kafka group's members, in join order of their ids; ``silent`` past their session timeout.
SELECT member_id, group_instance_id, client_id, client_host, session_timeout_ms,
       rebalance_timeout_ms, protocol_names, protocol_metadata, joined, join_generation,
       assignment,
       last_heartbeat_at < now() - make_interval(secs => session_timeout_ms / 1000.0) AS silent
FROM kafka_group_members WHERE group_id = %(group_id)s ORDER BY member_id
