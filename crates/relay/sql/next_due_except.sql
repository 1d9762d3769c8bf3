-- The lane beside dedicated ones: when the next unpublished row of any
-- topic but those in $1 becomes due (NULL when there is none).
SELECT min(available_at) FROM job_outbox WHERE published_at IS NULL AND topic <> ALL($1::text[])
