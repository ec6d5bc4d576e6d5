INSERT INTO topic_traffic (topic_id, minute, published, consumed)
SELECT t.topic_id, to_timestamp(t.minute_s), t.published, t.consumed
FROM unnest(%(topic_ids)s::text[], %(minute_s)s::bigint[], %(published)s::bigint[],
            %(consumed)s::bigint[]) AS t(topic_id, minute_s, published, consumed)
ORDER BY t.topic_id, t.minute_s
ON CONFLICT (topic_id, minute) DO UPDATE
SET published = topic_traffic.published + excluded.published,
    consumed = topic_traffic.consumed + excluded.consumed
