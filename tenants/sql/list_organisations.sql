SELECT o.id, o.name, o.tier, o.custom_limits, o.created_at,
       (SELECT count(*) FROM projects p WHERE p.organisation_id = o.id) AS project_count
FROM organisations o ORDER BY o.created_at, o.id
