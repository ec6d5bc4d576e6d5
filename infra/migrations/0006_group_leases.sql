-- Range leases: a pull that takes fresh offsets of a partition records ONE row for all of them
-- (attempt 1) instead of one group_deliveries row per message. Acks flip bits; an offset that
-- leaves the range (nack, partial extend, expiry) becomes an ordinary group_deliveries row.
-- See docs/consumer-groups.md.

CREATE TABLE group_leases (
    group_id     text        NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    partition    integer     NOT NULL,
    -- Random base62; the range's ackIds are 'ack_' || lease_id || base62(offset - first_offset).
    lease_id     text        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    member_id    text        NOT NULL,
    lease_until  timestamptz NOT NULL,
    -- Bit i (from the left) is about offset first_offset + i. acked: acked through this lease.
    -- done: acked, or handed over to a group_deliveries row; done covers acked.
    acked        varbit      NOT NULL,
    done         varbit      NOT NULL,
    -- Offsets of the range not done yet (the zero bits of done): what maxInFlight counts.
    open_count   integer     NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, lease_id),
    CHECK (last_offset >= first_offset),
    CHECK (length(done) = last_offset - first_offset + 1 AND length(acked) = length(done)),
    CHECK (open_count BETWEEN 0 AND last_offset - first_offset + 1)
);
CREATE INDEX group_leases_partition_idx ON group_leases (group_id, partition, first_offset);
CREATE INDEX group_leases_open_idx ON group_leases (group_id, lease_until) WHERE open_count > 0;
