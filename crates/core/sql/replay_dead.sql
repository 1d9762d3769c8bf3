-- Operator replay of dead-lettered (FAILED) jobs: back to QUEUED with attempts
-- reset, one audit row per job. Filters are optional: one job ($1), or a group
-- by type ($2), error code ($3), finished since ($4) and until ($8); at most
-- $5 jobs. $6 actor, $7 reason. The generation is never reset, so fencing still holds
-- against any worker of an earlier life of the job.
WITH target AS (
    SELECT job_id
    FROM jobs
    WHERE state = 'FAILED'
      AND ($1::uuid IS NULL OR job_id = $1)
      AND ($2::text IS NULL OR job_type = $2)
      AND ($3::text IS NULL OR last_error_code = $3)
      AND ($4::timestamptz IS NULL OR finished_at >= $4)
      AND ($8::timestamptz IS NULL OR finished_at <= $8)
    ORDER BY finished_at, job_id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
),
replayed AS (
    UPDATE jobs j
    SET state = 'QUEUED',
        attempt_count = 0,
        run_after = now(),
        finished_at = NULL,
        updated_at = now()
    FROM target t
    WHERE j.job_id = t.job_id
    RETURNING j.job_id, j.job_type, j.last_error_code, j.last_error
),
audited AS (
    INSERT INTO job_audit (job_id, action, actor, reason, details)
    SELECT r.job_id, 'replay', $6, $7,
           jsonb_build_object('job_type', r.job_type,
                              'last_error_code', r.last_error_code,
                              'last_error', r.last_error)
    FROM replayed r
)
SELECT job_id FROM replayed
