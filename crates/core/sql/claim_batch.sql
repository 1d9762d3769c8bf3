-- PostgreSQL-path claim: take up to $2 due jobs of queue $1, most urgent first,
-- skipping rows other claimers hold. Every claim raises the fencing token
-- (lease_generation) and counts an attempt.
-- $3 lease owner, $4 lease duration in milliseconds, $5 how long a job must
-- have been due (0; the broker path's safety net asks for overdue jobs only).
-- A queue with tenant caps yields nothing here: its claim is
-- jobwire_claim_capped (the caller asks for it when this found nothing), so
-- a claimer that has not noticed the cap takes too little, never too much.
WITH picked AS (
    SELECT job_id
    FROM jobs
    WHERE queue = $1
      AND state IN ('QUEUED', 'RETRY_WAIT')
      AND run_after <= now() - $5 * interval '1 millisecond'
      AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = $1 AND (q.paused OR q.tenant_capped))
    ORDER BY priority, run_after, job_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET state = 'RUNNING',
    lease_owner = $3,
    lease_expires_at = now() + $4 * interval '1 millisecond',
    lease_generation = j.lease_generation + 1,
    attempt_count = j.attempt_count + 1,
    heartbeat_at = now(),
    updated_at = now()
FROM picked
WHERE j.job_id = picked.job_id
-- The columns the worker reads, by name: a prepared statement returning
-- `j.*` fails once a migration adds a column to jobs ("cached plan must not
-- change result type"), in every running worker during a rolling deploy.
-- The payload as text: the worker parses it, and fails a job whose stored
-- payload it cannot read (a number beyond a double, nesting deeper than
-- 128) rather than the whole claim.
RETURNING j.job_id, j.queue, j.job_type, j.priority, j.payload::text AS payload, j.attempt_count, j.max_attempts,
          j.run_after, j.lease_expires_at, j.lease_generation, j.created_at, j.traceparent,
          j.tracestate
