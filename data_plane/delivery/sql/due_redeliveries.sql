SELECT "offset", attempt, state, first_delivered_at, last_error FROM group_deliveries
WHERE group_id = %(group_id)s AND partition = %(partition)s
  AND ((state = 'leased' AND lease_until <= now()) OR (state = 'retry' AND available_at <= now()))
ORDER BY "offset" LIMIT %(limit)s FOR UPDATE
