-- Dead letters of one partition, set-based: the copies (for messages still stored) and the rows
-- marked dead, one statement each however many there are.
UPDATE group_deliveries d SET state = 'dead', ack_id = NULL, lease_until = NULL, last_error = v.error, updated_at = now()
FROM unnest(%(offsets)s::bigint[], %(errors)s::text[]) AS v("offset", error)
WHERE d.group_id = %(group_id)s AND d.partition = %(partition)s AND d."offset" = v."offset"
