-- Failures of onFailure hooks counted by one process since its last flush.
UPDATE group_hooks h SET errors = h.errors + v.n
FROM unnest(%(ids)s::text[], %(counts)s::bigint[]) AS v(id, n) WHERE h.group_id = v.id
