-- A group whose fairness was turned off becomes an ordinary group again once no partition has
-- anything delivered above its delivered_offset (until then its pulls stay on the fair path).
DELETE FROM group_fairness f
WHERE f.group_id = %(group_id)s AND NOT f.enabled
  AND NOT EXISTS (SELECT 1 FROM group_leases l JOIN group_partitions gp USING (group_id, partition)
                  WHERE l.group_id = f.group_id AND l.last_offset >= gp.delivered_offset)
  AND NOT EXISTS (SELECT 1 FROM group_deliveries d JOIN group_partitions gp USING (group_id, partition)
                  WHERE d.group_id = f.group_id AND d."offset" >= gp.delivered_offset)
