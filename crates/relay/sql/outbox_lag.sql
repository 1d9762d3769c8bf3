-- Outbox lag: age in seconds of the oldest due, unpublished row (0 when none).
SELECT coalesce(extract(epoch FROM now() - min(available_at)), 0)::float8
FROM job_outbox
WHERE published_at IS NULL AND available_at <= now()
