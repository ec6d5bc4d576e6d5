-- A fair group's redeliveries refused by a throttle: they wait until a token is due, as retries,
-- without counting an attempt (their attempt is what their next delivery adds one to).
UPDATE group_deliveries SET state = 'retry', ack_id = NULL, member_id = NULL, lease_until = NULL,
       available_at = now() + make_interval(secs => %(wait_s)s), updated_at = now()
WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = ANY(%(offsets)s::bigint[])
