-- In batches, each its own transaction on an autocommit connection.
DELETE FROM settled_acks WHERE ctid IN (
    SELECT ctid FROM settled_acks WHERE settled_at < now() - make_interval(secs => %(grace_s)s)
    LIMIT %(batch)s)
