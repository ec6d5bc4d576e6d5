-- A new Kafka producer id (InitProducerId): unique across every replica and restart.
SELECT nextval('kafka_producer_ids') AS producer_id
