"""The read path: the segment reader, its block cache and the publish wake-ups."""
