-- Per-topic traffic for the dashboard's rate charts (docs/dashboard.md, "Traffic rates"): messages
-- committed and delivered to consumer groups per topic and UTC minute. Each API process counts in
-- memory (per committed block and per pull, never per message) and adds its counts to these rows
-- in one upsert every few seconds, so any number of processes add into the same rows.
--
-- No foreign key to topics: a flush must not fail because a topic was deleted meanwhile. Rows of
-- deleted topics are never read (pages resolve a topic by name to its current id) and age out:
-- each flush deletes rows older than two days.
CREATE TABLE topic_traffic (
    topic_id   text        NOT NULL,
    minute     timestamptz NOT NULL,
    published  bigint      NOT NULL DEFAULT 0 CHECK (published >= 0),
    consumed   bigint      NOT NULL DEFAULT 0 CHECK (consumed >= 0),
    PRIMARY KEY (topic_id, minute)
);
CREATE INDEX topic_traffic_minute_idx ON topic_traffic (minute);
