-- Source objects, locked in key order (two swaps of different partitions can share objects),
-- stamped so the GC's grace period runs from now.
UPDATE segment_objects SET released_at = now()
WHERE object_key IN (
    SELECT object_key FROM segment_objects WHERE object_key = ANY(%(keys)s)
    ORDER BY object_key FOR UPDATE)
