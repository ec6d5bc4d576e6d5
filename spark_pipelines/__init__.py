"""PySpark jobs: segment compaction, lag analytics, usage aggregation."""
