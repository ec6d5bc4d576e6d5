-- A rebalance starts: every member must join again before the deadline (the longest
-- rebalance timeout of the members).
WITH reset AS (
    UPDATE kafka_group_members SET joined = false WHERE group_id = %(group_id)s
    RETURNING rebalance_timeout_ms
)
UPDATE kafka_groups
SET state = 'PreparingRebalance', protocol_type = %(protocol_type)s, updated_at = now(),
    rebalance_deadline = now() + make_interval(
        secs => greatest(coalesce((SELECT max(rebalance_timeout_ms) FROM reset), 0),
                         %(min_timeout_ms)s) / 1000.0)
WHERE id = %(group_id)s
