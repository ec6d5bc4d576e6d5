-- The organisations a month is invoiced to: those of a billed tier that existed before the month
-- ended or have usage in it. ``%(organisation_id)s`` narrows it to one (NULL: all).
SELECT o.id, o.name, o.tier
FROM organisations o
WHERE o.tier = ANY(%(tiers)s::text[])
  AND (%(organisation_id)s::text IS NULL OR o.id = %(organisation_id)s::text)
  AND (o.created_at < %(until)s
       OR EXISTS (SELECT 1 FROM usage_hourly u JOIN environments e ON e.id = u.environment_id
                  WHERE e.organisation_id = o.id AND u.hour >= %(since)s AND u.hour < %(until)s))
ORDER BY o.id
