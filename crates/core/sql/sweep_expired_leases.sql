-- Return up to $1 jobs whose lease expired without a heartbeat (a crashed or
-- partitioned worker): CANCEL_REQUESTED -> CANCELLED; attempts exhausted ->
-- FAILED; otherwise RETRY_WAIT, claimable at once (the lease already delayed
-- it). SKIP LOCKED plus the re-check in the UPDATE make several sweepers safe,
-- and a heartbeat that lands first wins. The wake-up is written by the
-- jobs_wake_reclaimable trigger.
WITH expired AS (
    SELECT job_id
    FROM jobs
    WHERE state IN ('RUNNING', 'CANCEL_REQUESTED')
      AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET state = CASE
        WHEN j.state = 'CANCEL_REQUESTED' THEN 'CANCELLED'
        WHEN j.attempt_count >= j.max_attempts THEN 'FAILED'
        ELSE 'RETRY_WAIT'
    END,
    finished_at = CASE
        WHEN j.state = 'CANCEL_REQUESTED' OR j.attempt_count >= j.max_attempts THEN now()
    END,
    run_after = CASE
        WHEN j.state = 'RUNNING' AND j.attempt_count < j.max_attempts THEN now()
        ELSE j.run_after
    END,
    last_error_code = 'LEASE_EXPIRED',
    lease_expired_at = j.lease_expires_at,
    last_error = format('lease of %s (generation %s) expired at %s without a heartbeat',
                        j.lease_owner, j.lease_generation, j.lease_expires_at),
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = now()
FROM expired
WHERE j.job_id = expired.job_id
  AND j.state IN ('RUNNING', 'CANCEL_REQUESTED')
  AND j.lease_expires_at < now()
RETURNING j.job_id, j.state, j.queue, j.lease_generation
