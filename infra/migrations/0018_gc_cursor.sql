-- Where orphan collection has got to (docs/faults.md): segment object keys carry the hour they
-- were written (segments/yyyy/mm/dd/hh/...), so a run lists only the hours after the last one it
-- finished (all of whose objects were past the grace period), plus a full listing once a day
-- for keys outside those prefixes (older key layouts, compacted objects).

CREATE TABLE maintenance_cursors (
    name         text        PRIMARY KEY,
    done_through timestamptz NOT NULL,  -- every object of an hour before this one was checked
    full_at      timestamptz NOT NULL,  -- the last full listing
    updated_at   timestamptz NOT NULL DEFAULT now()
);
