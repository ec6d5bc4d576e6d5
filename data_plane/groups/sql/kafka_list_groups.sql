-- The Kafka groups of an environment (ListGroups).
SELECT name, protocol_type, state FROM kafka_groups
WHERE environment_id = %(environment_id)s ORDER BY name
