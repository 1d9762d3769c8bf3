-- Resume claiming from queue $1 and wake its waiting jobs in the same
-- transaction: wake-ups that arrived while it was paused were acknowledged
-- as misses, so every due claimable job of a broker-dispatched queue gets a
-- fresh wake-up now (jobs not yet due still have theirs in the outbox), and
-- a PostgreSQL-path queue gets a NOTIFY. Returns how many jobs were woken.
WITH resumed AS (
    INSERT INTO job_queues (queue, paused)
    VALUES ($1, false)
    ON CONFLICT (queue) DO UPDATE SET paused = false, updated_at = now()
    RETURNING queue, dispatch, topic
),
woken AS (
    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT r.topic, j.job_id::text, w.payload, w.headers, now()
    FROM resumed r
    JOIN jobs j ON j.queue = r.queue
    CROSS JOIN LATERAL jobwire_wake_up(j.job_id, j.lease_generation, j.queue, j.job_type, 'resume',
                                     j.traceparent, j.tracestate) w
    WHERE r.dispatch = 'broker'
      AND j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.run_after <= now()
    RETURNING 1
)
SELECT (SELECT count(*) FROM woken) AS woken
FROM resumed r
LEFT JOIN LATERAL (SELECT pg_notify('jobwire_jobs', r.queue) WHERE r.dispatch = 'postgres') n ON true
