-- A dedicated lane: take up to $1 due rows of the topics in $2, oldest due
-- first, skipping rows other relays hold.
--
-- Each topic is read on its own from job_outbox_topic_due_idx, in index
-- order, so a bulk backlog on other topics costs this lane nothing. The
-- published_at test is written so that it matches no partial index: as
-- `published_at IS NULL` it matched job_outbox_due_idx, and with statistics
-- from before a backlog (or a generic plan) PostgreSQL read that index in
-- due order and filtered out every other topic's row: 36 ms a pass behind
-- 100,000 bulk rows, against 0.3 ms here (docs/benchmarks.md).
--
-- With several topics, rows past the batch that a topic's read locked stay
-- locked until this pass commits: another relay of the lane skips them for
-- that long, and a later pass takes them.
SELECT o.id, o.topic, o.message_key, o.payload::text AS payload, o.headers, o.attempts
FROM unnest($2::text[]) AS lane(topic)
CROSS JOIN LATERAL (
    SELECT o.*
    FROM job_outbox o
    WHERE o.topic = lane.topic
      AND (o.published_at IS NULL) IS TRUE
      AND o.available_at <= now()
    ORDER BY o.available_at, o.id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
) o
ORDER BY o.available_at, o.id
LIMIT $1
