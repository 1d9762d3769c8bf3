-- Pause or resume claiming from a queue (a paused queue keeps accepting jobs).
INSERT INTO job_queues (queue, paused)
VALUES ($1, $2)
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = now()
