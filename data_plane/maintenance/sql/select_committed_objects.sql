SELECT object_key FROM segment_objects WHERE object_key = ANY(%(keys)s)
