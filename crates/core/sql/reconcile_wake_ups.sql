-- Re-wake up to $2 jobs of broker-dispatched queues that have been due and
-- claimable for longer than $1 ms with no change in that time: their
-- wake-up was lost (a purged queue, a broker that dropped it, a consumer
-- that died between receive and claim). Each gets a fresh wake-up row, and
-- updated_at and rewoken_at are set to the same time. A job whose last
-- change was such a re-wake (the two still equal, and its queue not
-- resumed, moved or reconfigured since: those write fresh wake-ups or
-- change what is due without touching every job) is re-woken again only
-- after as long as it had been due at that re-wake (at least the grace,
-- at most 16 graces). A job whose wake-ups keep arriving nowhere (a broker
-- queue with no consumer, or one behind a backlog longer than the grace)
-- and that nothing else changes is re-woken 1, 2, 4, 8, 16 and 32 graces
-- after it became due, then every 16 graces, not every grace: each
-- re-wake is one more message for the broker to hold, and a running
-- worker's safety net claims a job that has been due for 3 graces (by
-- default) from the table anyway. Any other change of the job makes its
-- next re-wake come one grace after that change (migration
-- 20261206000012).
-- The caller skips this while the relay lags by more than the grace period
-- (the wake-ups are then still in the outbox, not lost). Paused queues are
-- left alone: their jobs get wake-ups when the queue resumes. So is a capped
-- tenant's job without a slot: it is waiting for one, not lost (a slot is
-- handed over with its wake-up; jobwire_hand_out_free_slots covers the rest).
WITH stale AS (
    SELECT j.job_id
    FROM jobs j
    JOIN job_queues q ON q.queue = j.queue AND q.dispatch = 'broker' AND NOT q.paused
    WHERE j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.run_after <= now() - $1 * interval '1 millisecond'
      AND j.updated_at <= now() - CASE
              WHEN j.rewoken_at = j.updated_at AND j.rewoken_at > q.updated_at
              THEN greatest($1 * interval '1 millisecond',
                            least(j.updated_at - j.run_after, 16 * $1 * interval '1 millisecond'))
              ELSE $1 * interval '1 millisecond'
          END
      AND (j.tenant IS NULL OR j.tenant_slot IS NOT NULL
           OR jobwire_tenant_cap(j.queue, j.tenant) IS NULL)
    ORDER BY j.run_after
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
),
touched AS (
    UPDATE jobs j
    SET updated_at = now(), rewoken_at = now()
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
