-- The API's pulse: every replica writes it each second (data_plane/groups/pulse.py). A gap in it
-- means PostgreSQL (or every replica) was stalled, and nobody could heartbeat meanwhile, so a
-- member's silence counts only from the end of the last gap (qc_silence_origin, docs/faults.md).
CREATE TABLE api_pulse (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),  -- one row
    pulse_at   timestamptz NOT NULL,  -- the last pulse
    resumed_at timestamptz NOT NULL   -- the first pulse after the last gap
);
