-- What a fair group delivered at or above each partition's delivered_offset (ranges and rows):
-- the offsets of its look-ahead window that are not pending.
SELECT l.partition, greatest(l.first_offset, p.delivered) AS first_offset, l.last_offset
FROM unnest(%(partitions)s::int[], %(delivered)s::bigint[]) AS p(partition, delivered)
JOIN group_leases l ON l.group_id = %(group_id)s AND l.partition = p.partition
                   AND l.last_offset >= p.delivered
UNION ALL
SELECT d.partition, d."offset", d."offset"
FROM unnest(%(partitions)s::int[], %(delivered)s::bigint[]) AS p(partition, delivered)
JOIN group_deliveries d ON d.group_id = %(group_id)s AND d.partition = p.partition
                       AND d."offset" >= p.delivered
