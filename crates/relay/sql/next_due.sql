-- When the next unpublished row becomes due (NULL when there is none).
SELECT min(available_at) FROM job_outbox WHERE published_at IS NULL
