-- The Kafka group (created Empty on first use), locked for this transaction: every change of
-- its membership or state happens under this lock, on whichever replica a client reached.
INSERT INTO kafka_groups (id, environment_id, name)
VALUES (%(id)s, %(environment_id)s, %(name)s)
ON CONFLICT (environment_id, name) DO UPDATE SET updated_at = kafka_groups.updated_at
RETURNING id, name, state, generation, protocol_type, protocol_name, leader_id,
          rebalance_deadline, rebalance_deadline <= now() AS deadline_passed
