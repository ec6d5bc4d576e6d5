-- The blocks a flush committed, found by its object key (one row per block, or none).
SELECT topic_id, partition, base_offset FROM segment_blocks WHERE object_key = %(object_key)s
