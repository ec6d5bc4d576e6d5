-- Failures of onEnqueue hooks counted by one process since its last flush.
UPDATE topic_hooks h SET errors = h.errors + v.n
FROM unnest(%(ids)s::text[], %(counts)s::bigint[]) AS v(id, n) WHERE h.topic_id = v.id
