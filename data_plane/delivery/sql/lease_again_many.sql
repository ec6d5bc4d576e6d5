-- A pull's redeliveries of one partition leased again in one statement, each with a new ackId.
UPDATE group_deliveries d SET state = 'leased', attempt = v.attempt, ack_id = v.ack_id, member_id = %(member_id)s,
       lease_until = clock_timestamp() + make_interval(secs => %(ack_timeout_s)s), available_at = NULL, updated_at = now()
FROM unnest(%(offsets)s::bigint[], %(attempts)s::int[], %(ack_ids)s::text[]) AS v("offset", attempt, ack_id)
WHERE d.group_id = %(group_id)s AND d.partition = %(partition)s AND d."offset" = v."offset"
