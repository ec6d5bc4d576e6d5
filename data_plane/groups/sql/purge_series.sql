DELETE FROM lag_series WHERE ctid IN (
    SELECT ctid FROM lag_series WHERE bucket_start < now() - make_interval(secs => %(keep_s)s)
    LIMIT %(batch)s)
