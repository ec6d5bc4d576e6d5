-- A Kafka OffsetCommit on one topic: the committed offset of each partition, as Kafka does
-- (set, not only moved forward), and its metadata. Partitions the group had no row for yet
-- (added to the topic since) get one.
INSERT INTO group_partitions AS gp (group_id, partition, committed_offset, delivered_offset,
                                    commit_metadata)
SELECT %(group_id)s, c.partition, c.committed, c.committed, c.metadata
FROM unnest(%(partitions)s::integer[], %(offsets)s::bigint[], %(metadata)s::text[])
    AS c(partition, committed, metadata)
ON CONFLICT (group_id, partition) DO UPDATE
    SET committed_offset = excluded.committed_offset,
        delivered_offset = excluded.delivered_offset,
        commit_metadata = excluded.commit_metadata
