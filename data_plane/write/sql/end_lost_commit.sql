-- After a lost commit reply: end the backend still running that commit (if it is), so what the
-- lookup below sees is final. pg_terminate_backend waits up to 2 s for the backend to exit.
SELECT pg_terminate_backend(pid, 2000) AS ended FROM pg_stat_activity
WHERE pid = %(pid)s AND state = 'active' AND query LIKE '%%qc_commit_flush%%'
