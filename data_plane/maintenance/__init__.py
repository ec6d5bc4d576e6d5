"""Maintenance: topic deletion, retention, orphan collection, compaction bookkeeping."""
