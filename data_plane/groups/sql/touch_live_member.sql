-- As TOUCH_MEMBER, for a member not yet silent past its session (by LOCK_SILENT_MEMBERS' rule).
UPDATE group_members SET last_heartbeat_at = now()
WHERE id = %(id)s AND group_id = %(group_id)s
  AND greatest(last_heartbeat_at, qc_silence_origin(%(gap_s)s)) >= now() - make_interval(secs => session_timeout_ms / 1000.0)
RETURNING generation
