-- Re-wake up to $2 jobs of broker-dispatched queues that have been due and
-- claimable for longer than $1 ms with no change in that time: their
-- wake-up was lost (a purged queue, a broker that dropped it, a consumer
-- that died between receive and claim). Each gets a fresh wake-up row, and
-- updated_at is touched so the next re-wake comes a grace period later.
-- The caller skips this while the relay lags by more than the grace period
-- (the wake-ups are then still in the outbox, not lost). Paused queues are
-- left alone: their jobs get wake-ups when the queue resumes. So is a capped
-- tenant's job without a slot: it is waiting for one, not lost (a slot is
-- handed over with its wake-up; jobwire_hand_out_free_slots covers the rest).
WITH stale AS (
    SELECT j.job_id
    FROM jobs j
    WHERE j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.queue IN (SELECT q.queue FROM job_queues q
                      WHERE q.dispatch = 'broker' AND NOT q.paused)
      AND j.run_after <= now() - $1 * interval '1 millisecond'
      AND j.updated_at <= now() - $1 * interval '1 millisecond'
      AND (j.tenant IS NULL OR j.tenant_slot IS NOT NULL
           OR jobwire_tenant_cap(j.queue, j.tenant) IS NULL)
    ORDER BY j.run_after
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
),
touched AS (
    UPDATE jobs j
    SET updated_at = now()
    FROM stale
    WHERE j.job_id = stale.job_id
    RETURNING j.job_id, j.queue, j.job_type, j.lease_generation, j.traceparent, j.tracestate
)
INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
SELECT q.topic, t.job_id::text, w.payload, w.headers, now()
FROM touched t
JOIN job_queues q ON q.queue = t.queue AND q.dispatch = 'broker'
CROSS JOIN LATERAL jobwire_wake_up(t.job_id, t.lease_generation, t.queue, t.job_type, 'reconcile',
                                   t.traceparent, t.tracestate) w
RETURNING (payload->>'job_id')::uuid
