-- created_at is the newest source block's, so the minimum age still measures the data's age.
INSERT INTO segment_blocks (topic_id, partition, base_offset, count, object_key, byte_offset,
                            byte_length, min_timestamp_ms, max_timestamp_ms, created_at)
VALUES (%(topic_id)s, %(partition)s, %(first)s, %(count)s, %(object_key)s, %(byte_offset)s,
        %(byte_length)s, %(min_timestamp_ms)s, %(max_timestamp_ms)s, %(created_at)s)
