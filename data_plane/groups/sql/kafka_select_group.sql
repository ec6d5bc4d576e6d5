-- A Kafka group without locking it (a JoinGroup or SyncGroup waiting for the others).
SELECT id, name, state, generation, protocol_type, protocol_name, leader_id,
       rebalance_deadline, rebalance_deadline <= now() AS deadline_passed
FROM kafka_groups WHERE environment_id = %(environment_id)s AND name = %(name)s
