-- The silent members, locked (a heartbeat committed meanwhile takes its member out of the set).
-- Silence counts from the member's last heartbeat or the end of the last stall, whichever is
-- later (qc_silence_origin: PostgreSQL's start, or the end of a gap in the API's pulse): nobody
-- could heartbeat while the database was down or frozen, so a stall gives everyone a session
-- instead of evicting every consumer at once (docs/faults.md).
SELECT id FROM group_members
WHERE group_id = %(group_id)s
  AND greatest(last_heartbeat_at, qc_silence_origin(%(gap_s)s)) < now() - make_interval(secs => session_timeout_ms / 1000.0)
ORDER BY id FOR UPDATE
