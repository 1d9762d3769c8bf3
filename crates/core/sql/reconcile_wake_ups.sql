-- Re-wake up to $2 jobs of broker-dispatched queues that have been due and
-- claimable for longer than $1 ms with no change in that time: their
-- wake-up was lost (a purged queue, a broker that dropped it, a consumer
-- that died between receive and claim). Each gets a fresh wake-up row, and
-- updated_at is touched so the next re-wake comes a grace period later.
-- The caller skips this while the relay lags by more than the grace period
-- (the wake-ups are then still in the outbox, not lost).
WITH stale AS (
    SELECT j.job_id
    FROM jobs j
    WHERE j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.queue IN (SELECT q.queue FROM job_queues q WHERE q.dispatch = 'broker')
      AND j.run_after <= now() - $1 * interval '1 millisecond'
      AND j.updated_at <= now() - $1 * interval '1 millisecond'
    ORDER BY j.run_after
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
),
touched AS (
    UPDATE jobs j
    SET updated_at = now()
    FROM stale
    WHERE j.job_id = stale.job_id
    RETURNING j.job_id, j.queue, j.job_type, j.lease_generation
)
INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
SELECT q.topic,
       t.job_id::text,
       jsonb_build_object('job_id', t.job_id, 'generation', t.lease_generation,
                          'queue', t.queue, 'job_type', t.job_type),
       jsonb_build_object('content-type', 'application/json', 'jobwire-kind', 'wake-up',
                          'jobwire-reason', 'reconcile'),
       now()
FROM touched t
JOIN job_queues q ON q.queue = t.queue AND q.dispatch = 'broker'
RETURNING (payload->>'job_id')::uuid
