INSERT INTO api_pulse AS p (id, pulse_at, resumed_at) VALUES (true, now(), now())
ON CONFLICT (id) DO UPDATE SET
    resumed_at = CASE WHEN p.pulse_at < now() - make_interval(secs => %(gap_s)s) THEN now()
                      ELSE p.resumed_at END,
    pulse_at = greatest(p.pulse_at, now())
