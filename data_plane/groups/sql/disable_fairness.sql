-- Fairness turned off: the group is delivered in offset order from now on; its row stays only
-- while a partition has deliveries above its delivered_offset (FORGET_FAIRNESS runs next).
WITH off AS (UPDATE group_fairness SET enabled = false WHERE group_id = %(group_id)s)
DELETE FROM fair_deficits WHERE group_id = %(group_id)s
