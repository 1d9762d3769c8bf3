-- A dedicated lane: when the next unpublished row of the topics in $1
-- becomes due (NULL when there is none). One index probe per topic, for
-- the reason given in claim_due_only.sql.
SELECT min(next.available_at)
FROM unnest($1::text[]) AS lane(topic)
CROSS JOIN LATERAL (
    SELECT o.available_at
    FROM job_outbox o
    WHERE o.topic = lane.topic
      AND (o.published_at IS NULL) IS TRUE
    ORDER BY o.available_at
    LIMIT 1
) next
