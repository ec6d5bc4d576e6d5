"""Topics: names, retention, partitions and quotas; their SQL, wire shapes and dashboard read models."""
