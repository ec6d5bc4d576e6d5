-- Committed offset = lowest offset not done among per-message rows, range leases and
-- delivered_offset; never moves back. Rows and leases wholly below it are forgotten. The
-- statement is the function qc_commit_progress (migration 0010), which acks also run in SQL.
SELECT partition, committed_offset FROM qc_commit_progress(%(group_id)s, %(partitions)s::int[])
