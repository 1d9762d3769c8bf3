-- Declare how a queue is dispatched: 'postgres' (SKIP LOCKED workers, NOTIFY)
-- or 'broker' (wake-ups through job_outbox on `topic`).
INSERT INTO job_queues (queue, dispatch, topic)
VALUES ($1, $2, $3)
ON CONFLICT (queue) DO UPDATE
SET dispatch = excluded.dispatch, topic = excluded.topic, updated_at = now()
