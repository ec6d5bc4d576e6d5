INSERT INTO webhook_deliveries (id, environment_id, event, payload)
VALUES (%(id)s, %(environment_id)s, %(event)s, %(payload)s::jsonb)
