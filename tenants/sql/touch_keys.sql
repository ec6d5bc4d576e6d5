UPDATE api_keys k SET last_used_at = greatest(k.last_used_at, v.used_at)
FROM unnest(%(ids)s::text[], %(used_at)s::timestamptz[]) AS v(id, used_at)
WHERE k.id = v.id
