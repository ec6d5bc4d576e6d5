SELECT pg_advisory_xact_lock(hashtextextended('qc_topics:' || %(environment_id)s, 0))
