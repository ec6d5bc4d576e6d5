-- Buckets of %(bucket_s)s seconds from %(since)s: the minutes' counts added up.
SELECT to_timestamp(floor(extract(epoch FROM minute) / %(bucket_s)s) * %(bucket_s)s) AS bucket,
       sum(published)::bigint AS published, sum(consumed)::bigint AS consumed
FROM topic_traffic
WHERE topic_id = %(topic_id)s AND minute >= %(since)s AND minute < %(until)s
GROUP BY 1 ORDER BY 1
