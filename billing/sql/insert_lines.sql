INSERT INTO invoice_lines (invoice_id, position, kind, description, project_id, project_name, environment_id,
                           environment_name, messages_in, messages_out, bytes_in, bytes_out, requests,
                           storage_gb_months, amount_cents)
SELECT %(invoice_id)s, v.*
FROM unnest(%(position)s::int[], %(kind)s::text[], %(description)s::text[], %(project_id)s::text[],
            %(project_name)s::text[], %(environment_id)s::text[], %(environment_name)s::text[],
            %(messages_in)s::bigint[], %(messages_out)s::bigint[], %(bytes_in)s::bigint[],
            %(bytes_out)s::bigint[], %(requests)s::bigint[], %(storage_gb_months)s::numeric[],
            %(amount_cents)s::bigint[]) AS v
