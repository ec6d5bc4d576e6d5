-- Committed objects older than the grace period that no block references (their blocks were
-- dropped by retention, deletion or compaction and the object delete did not happen). The grace
-- runs from the later of the commit and the last compaction that moved blocks out (released_at).
DELETE FROM segment_objects o
WHERE greatest(o.created_at, o.released_at) < now() - make_interval(secs => %(grace_s)s)
  AND NOT EXISTS (SELECT 1 FROM segment_blocks b WHERE b.object_key = o.object_key)
RETURNING o.object_key
