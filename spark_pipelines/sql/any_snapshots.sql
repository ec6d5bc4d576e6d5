-- Whether a window has any snapshot: the scheduled run starts no JVM for an empty window.
SELECT EXISTS (SELECT 1 FROM lag_snapshots WHERE taken_at >= %(since)s AND taken_at < %(until)s) AS found
