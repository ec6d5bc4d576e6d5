SELECT position, kind, description, project_id, project_name, environment_id, environment_name, messages_in,
       messages_out, bytes_in, bytes_out, requests, storage_gb_months, amount_cents
FROM invoice_lines WHERE invoice_id = %(invoice_id)s ORDER BY position
