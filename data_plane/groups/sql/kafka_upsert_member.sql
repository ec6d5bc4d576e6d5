-- A member joining (or rejoining) the rebalance in progress, with its protocols.
INSERT INTO kafka_group_members (group_id, member_id, group_instance_id, client_id, client_host,
                                 session_timeout_ms, rebalance_timeout_ms, protocol_names,
                                 protocol_metadata, joined)
VALUES (%(group_id)s, %(member_id)s, %(group_instance_id)s, %(client_id)s, %(client_host)s,
        %(session_timeout_ms)s, %(rebalance_timeout_ms)s, %(protocol_names)s,
        %(protocol_metadata)s, true)
ON CONFLICT (group_id, member_id) DO UPDATE
    SET group_instance_id = excluded.group_instance_id, client_id = excluded.client_id,
        client_host = excluded.client_host, session_timeout_ms = excluded.session_timeout_ms,
        rebalance_timeout_ms = excluded.rebalance_timeout_ms,
        protocol_names = excluded.protocol_names, protocol_metadata = excluded.protocol_metadata,
        joined = true, last_heartbeat_at = now()
