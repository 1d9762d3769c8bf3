-- Outbox lag: age in milliseconds of the oldest due, unpublished row (0 when none).
SELECT coalesce((extract(epoch FROM now() - min(available_at)) * 1000)::bigint, 0)
FROM job_outbox
WHERE published_at IS NULL AND available_at <= now()
