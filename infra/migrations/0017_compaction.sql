-- Segment compaction (docs/compaction.md, docs/decisions.md §28): when compaction moves the last
-- blocks out of an object, readers that looked the old index rows up a moment earlier may still
-- GET it. released_at records when compaction moved blocks out of the object; the orphan GC
-- (DELETE_EMPTY_OBJECTS) then waits its grace period from that moment, not from the object's
-- created_at (which for a compacted object is long past), and retention's immediate release of
-- emptied objects (DELETE_UNREFERENCED_OBJECTS) leaves such objects to the GC.
ALTER TABLE segment_objects ADD COLUMN released_at timestamptz;
