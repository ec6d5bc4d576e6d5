-- A member's own window: the most messages it may hold leased and unsettled at once, set when it
-- joins or on its stream or pull (docs/consumer-groups.md, "A member's window"). NULL: the group's
-- maxInFlight. A pull leases within the smaller of the two (qc_pull_state_v2, called by qc_pull_v2).
ALTER TABLE group_members
    ADD COLUMN max_in_flight integer CHECK (max_in_flight BETWEEN 1 AND 100000);
