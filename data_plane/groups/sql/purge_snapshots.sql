-- In batches, each its own transaction on an autocommit connection (as PURGE_SETTLED_ACKS).
DELETE FROM lag_snapshots WHERE ctid IN (
    SELECT ctid FROM lag_snapshots WHERE taken_at < now() - make_interval(secs => %(keep_s)s)
    LIMIT %(batch)s)
