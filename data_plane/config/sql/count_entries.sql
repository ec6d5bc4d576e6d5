-- Entries of an environment, under a lock on its row so two replicas cannot both pass the limit.
SELECT (SELECT count(*) FROM runtime_config WHERE environment_id = e.id) AS entries
FROM environments e WHERE e.id = %(environment_id)s FOR UPDATE
