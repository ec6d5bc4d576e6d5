INSERT INTO partitions (topic_id, partition)
SELECT %(topic_id)s, p FROM generate_series(%(first)s::integer, %(last)s::integer) AS p
ON CONFLICT DO NOTHING
