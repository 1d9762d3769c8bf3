-- Cancel a job: QUEUED / RETRY_WAIT end CANCELLED at once; RUNNING becomes
-- CANCEL_REQUESTED (the worker sees it at its next heartbeat). Returns the
-- state before and after; `after_state` is NULL when nothing changed
-- (unknown job, already CANCEL_REQUESTED, or finished). A change is recorded
-- in job_audit with actor $2.
--
-- Run after lock_job.sql in the same transaction, not with the lock in
-- this statement. A `FOR UPDATE` here waited for a concurrent claim and
-- read the claimed state, but the UPDATE below first builds the new row
-- from the version this statement's snapshot saw, and the table's checks
-- run on that row before PostgreSQL finds the newer version: a job
-- claimed meanwhile failed `jobs_lease_iff_held` (CANCEL_REQUESTED with
-- no lease), and the cancel failed. After the lock, this statement's
-- snapshot sees the version the lock holds.
WITH target AS (
    SELECT job_id, state FROM jobs WHERE job_id = $1
),
changed AS (
    UPDATE jobs j
    SET state = CASE WHEN t.state = 'RUNNING' THEN 'CANCEL_REQUESTED' ELSE 'CANCELLED' END,
        finished_at = CASE WHEN t.state = 'RUNNING' THEN NULL ELSE now() END,
        last_error_code = CASE WHEN t.state = 'RUNNING' THEN j.last_error_code ELSE 'CANCELLED' END,
        last_error = CASE WHEN t.state = 'RUNNING' THEN j.last_error ELSE 'cancelled before it ran' END,
        cancel_requested_at = now(),
        updated_at = now()
    FROM target t
    WHERE j.job_id = t.job_id
      AND t.state IN ('QUEUED', 'RETRY_WAIT', 'RUNNING')
      -- Always true after lock_job.sql; without it, a row that changed
      -- since `target` read it is left alone rather than mixed up.
      AND j.state = t.state
    RETURNING j.job_id, j.state
),
audited AS (
    INSERT INTO job_audit (job_id, action, actor, details)
    SELECT c.job_id, 'cancel', $2, jsonb_build_object('from_state', t.state, 'to_state', c.state)
    FROM changed c, target t
)
SELECT t.state AS before_state, c.state AS after_state
FROM target t
LEFT JOIN changed c ON true
