-- Retention: move up to $3 finished jobs into jobs_history, oldest first.
-- SUCCEEDED and CANCELLED rows leave after $1 ms, FAILED (the dead letters an
-- operator may still replay) after $2 ms. Moving a row frees its dedup_key.
WITH moved AS (
    DELETE FROM jobs
    WHERE job_id IN (
        SELECT job_id
        FROM jobs
        WHERE finished_at IS NOT NULL
          AND finished_at < now() - least($1, $2) * interval '1 millisecond'
          AND ((state IN ('SUCCEEDED', 'CANCELLED') AND finished_at < now() - $1 * interval '1 millisecond')
            OR (state = 'FAILED' AND finished_at < now() - $2 * interval '1 millisecond'))
        ORDER BY finished_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    )
    RETURNING *
)
INSERT INTO jobs_history (job_id, queue, job_type, priority, payload, state, attempt_count,
                          max_attempts, run_after, lease_owner, lease_expires_at,
                          lease_generation, heartbeat_at, dedup_key, last_error_code,
                          last_error, created_at, updated_at, finished_at,
                          schedule_name, scheduled_for, cancel_requested_at,
                          traceparent, tracestate, lease_expired_at, tenant)
SELECT job_id, queue, job_type, priority, payload, state, attempt_count,
       max_attempts, run_after, lease_owner, lease_expires_at,
       lease_generation, heartbeat_at, dedup_key, last_error_code,
       last_error, created_at, updated_at, finished_at,
       schedule_name, scheduled_for, cancel_requested_at,
       traceparent, tracestate, lease_expired_at, tenant
FROM moved
