-- A pull in one statement (migration 0009): touch, lock, state and fresh blocks, and, when no
-- redelivery is due on the member's partitions, the fresh offsets leased with these lease ids.
-- qc_pull_v3: within the member's own window (migration 0023), nothing leased for a fair group
-- (migration 0026: 'fair' says so, and the pull takes the fair path).
SELECT qc_pull_v3(%(group_id)s, %(member_id)s, %(topic_id)s, %(limit)s, %(async_commit)s,
                  %(lease_ids)s::text[]) AS pulled
