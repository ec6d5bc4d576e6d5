INSERT INTO segment_objects (object_key, size_bytes, block_count)
VALUES (%(object_key)s, %(size_bytes)s, 1)
