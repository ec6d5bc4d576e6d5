"""Write path, segment format, read path, topics, consumer groups, offsets, dead letters."""
