-- As LOCK_GROUP (NO KEY UPDATE, same reason), by id.
SELECT * FROM consumer_groups WHERE id = %(id)s FOR NO KEY UPDATE
