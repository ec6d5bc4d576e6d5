-- The fresh blocks of a pull read through the index, whatever the statistics say (docs/decisions.md
-- §18). In qc_pull_state (migration 0008) the upper bound of the blocks wanted referred to the
-- partitions row joined outside the LATERAL subquery, so it could not bound the index scan; with
-- the statistics of a young table a cached generic plan hash-joined EVERY block of the topic
-- instead (3.6 ms a pull after 15 s of a benchmark, growing with the topic). Now both bounds come
-- from the group partition row (a committed block always starts below next_offset), and the
-- LIMIT keeps the subquery from being flattened, so it is a per-partition index range scan.
-- Nothing else in the function changes.

-- qc_pull_state: defined in data_plane/delivery/functions/qc_pull_state.sql, applied after every migration.
