-- A dedicated lane: when the next unpublished row of the topics in $1
-- becomes due (NULL when there is none).
SELECT min(available_at) FROM job_outbox WHERE published_at IS NULL AND topic = ANY($1::text[])
