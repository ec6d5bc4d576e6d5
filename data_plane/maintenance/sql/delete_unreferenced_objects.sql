-- Committed objects among %(keys)s that no block references any more. An object compaction
-- moved blocks out of (released_at set) is left to DELETE_EMPTY_OBJECTS: readers may still GET it.
DELETE FROM segment_objects o
WHERE o.object_key = ANY(%(keys)s)
  AND o.released_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM segment_blocks b WHERE b.object_key = o.object_key)
RETURNING o.object_key
