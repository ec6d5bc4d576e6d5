-- Partition rows first, in partition order, then the topic row: the writer locks partitions (in a
-- fixed order) before its block inserts touch the topic row, so this order cannot deadlock with it.
SELECT partition FROM partitions WHERE topic_id = %(topic_id)s ORDER BY partition FOR UPDATE
