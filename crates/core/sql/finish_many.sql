-- Record the outcome of many attempts in one statement, each fenced by
-- (job_id, lease_owner, lease_generation). A row missing from the result lost
-- its lease (swept, reclaimed, or already finished): the caller reports Fenced.
--
-- outcome: 'succeeded' | 'retry' | 'failed' | 'cancel_ack' | 'returned'
--   succeeded  -> SUCCEEDED (also from CANCEL_REQUESTED: the work was done)
--   any other outcome while CANCEL_REQUESTED -> CANCELLED
--   returned   -> RETRY_WAIT, due as before, the claim's attempt uncounted:
--                 a job claimed ahead that no handler started
--   retry      -> RETRY_WAIT at now() + retry_delay_ms, or FAILED when attempts are exhausted
--   failed     -> FAILED (fatal, dead letter)
--   cancel_ack -> only from CANCEL_REQUESTED
-- The CASE expressions read j.* so that they see the row as locked, even if a
-- cancel request landed while this statement waited for the lock.
-- Tenant slots: every outcome leaves RUNNING, so a job holding a slot gives it
-- back. On a PostgreSQL-path queue this statement clears the slots, frees
-- their rows in one UPDATE and wakes the queue once; on a broker queue it
-- leaves the slot set, and the row trigger jobs_release_tenant_slot hands
-- each one over with its own wake-up (migration 20261203000001), after the
-- write, then clears the job's slot with an update of its own (migration
-- 20261203000005).
-- $1 job ids, $2 generations, $3 outcomes, $4 retry delays (ms), $5 error codes,
-- $6 error messages, $7 lease owner.
WITH done AS (
    UPDATE jobs j
    SET state = CASE
            WHEN o.outcome = 'succeeded' THEN 'SUCCEEDED'
            WHEN j.state = 'CANCEL_REQUESTED' THEN 'CANCELLED'
            WHEN o.outcome = 'returned' THEN 'RETRY_WAIT'
            WHEN o.outcome = 'retry' AND j.attempt_count < j.max_attempts THEN 'RETRY_WAIT'
            ELSE 'FAILED'
        END,
        run_after = CASE
            WHEN o.outcome = 'retry' AND j.state = 'RUNNING' AND j.attempt_count < j.max_attempts
                THEN now() + o.retry_delay_ms * interval '1 millisecond'
            ELSE j.run_after
        END,
        finished_at = CASE
            WHEN o.outcome = 'returned' AND j.state = 'RUNNING' THEN NULL
            WHEN o.outcome = 'retry' AND j.state = 'RUNNING' AND j.attempt_count < j.max_attempts
                THEN NULL
            ELSE now()
        END,
        last_error_code = CASE WHEN o.outcome IN ('succeeded', 'returned') THEN j.last_error_code
                               ELSE o.error_code END,
        last_error = CASE WHEN o.outcome IN ('succeeded', 'returned') THEN j.last_error
                          ELSE o.error_message END,
        attempt_count = CASE WHEN o.outcome = 'returned' THEN j.attempt_count - 1
                             ELSE j.attempt_count END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        updated_at = now(),
        -- The queue is looked up only for a job holding a slot.
        tenant_slot = CASE
            WHEN j.tenant_slot IS NULL
                 OR NOT EXISTS (SELECT 1 FROM job_queues q
                                WHERE q.queue = j.queue AND q.dispatch = 'broker')
                THEN NULL
            ELSE j.tenant_slot
        END
    FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[])
        AS o(job_id, lease_generation, outcome, retry_delay_ms, error_code, error_message)
    WHERE j.job_id = o.job_id
      AND j.lease_generation = o.lease_generation
      AND j.lease_owner = $7
      AND (j.state = 'CANCEL_REQUESTED' OR (j.state = 'RUNNING' AND o.outcome <> 'cancel_ack'))
    RETURNING j.job_id, j.state, j.run_after,
              -- Request -> CANCELLED, for the cancellation-latency histogram.
              CASE WHEN j.state = 'CANCELLED'
                   THEN extract(epoch FROM now() - j.cancel_requested_at)::float8
              END AS cancel_latency_s,
              j.tenant
),
-- The slots of the jobs above on PostgreSQL-path queues. A broker queue's
-- slot row is left to the trigger, which has already handed it over. Only
-- a job with a tenant can hold one: the others skip the slot lookup, so a
-- queue without caps pays next to nothing for this.
freed AS (
    UPDATE job_tenant_slots s
    SET job_id = NULL
    FROM done d
    WHERE d.tenant IS NOT NULL AND s.job_id = d.job_id
      AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = s.queue AND q.dispatch = 'broker')
    RETURNING s.queue
),
-- One notification per queue that got a slot back, if this transaction
-- takes the queue's wake token (as every other wake-up does).
woken AS (
    SELECT pg_notify('jobwire_jobs', f.queue)
    FROM (SELECT DISTINCT queue FROM freed) f
    WHERE jobwire_wake_token('jobwire_jobs', f.queue)
)
SELECT d.job_id, d.state, d.run_after, d.cancel_latency_s
FROM done d
-- A CTE that writes nothing runs only if read: this reads `woken` once,
-- before the first row, whatever its count.
WHERE (SELECT count(*) FROM woken) >= 0
