-- qc_silence_origin: the current definition, applied (CREATE OR REPLACE) after every migration.
--
-- Since when a member's silence counts: the latest of PostgreSQL's start and the end of the last
-- gap in the API's pulse (migration 0021). Nobody could heartbeat while the database was down or
-- frozen, or while no API replica ran, so that silence is nobody's fault. A pulse older than
-- p_gap_s is itself a gap that has not ended yet (the database has just come back and no pulse
-- landed since): silence counts from now. Without any pulse (no replica ever ran) likewise.
CREATE OR REPLACE FUNCTION qc_silence_origin(p_gap_s double precision)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT greatest(
        pg_postmaster_start_time(),
        coalesce(
            (SELECT CASE WHEN p.pulse_at < now() - make_interval(secs => p_gap_s) THEN now()
                         ELSE p.resumed_at END
             FROM api_pulse p),
            now()))
$$;
