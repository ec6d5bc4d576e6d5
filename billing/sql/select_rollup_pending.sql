-- The projects of an organisation whose month the rollup has not computed since their last usage
-- change: the invoice waits for them (the rollup's row must be at least as recent as every hourly
-- row it covers, so the invoice's lines add up to it).
SELECT e.project_id
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
LEFT JOIN usage_monthly m ON m.project_id = e.project_id AND m.month = %(since)s::date
WHERE e.organisation_id = %(organisation_id)s AND u.hour >= %(since)s AND u.hour < %(until)s
GROUP BY e.project_id, m.computed_at
HAVING m.computed_at IS NULL OR m.computed_at < max(u.updated_at)
ORDER BY e.project_id
