-- Create or replace schedule $1. A replacement with the same cron and zone
-- keeps its timeline (an occurrence due but not yet fired still fires, and
-- re-applying a schedule at every deploy loses nothing); a new cron or zone
-- restarts it at $11. Returns whether the row is new.
INSERT INTO job_schedules (name, cron, timezone, job_type, queue, payload, priority,
                           max_attempts, jitter_seconds, missed, next_run_at, max_catch_up,
                           tenant)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (name) DO UPDATE
SET cron = excluded.cron, timezone = excluded.timezone, job_type = excluded.job_type,
    queue = excluded.queue, payload = excluded.payload, priority = excluded.priority,
    max_attempts = excluded.max_attempts, jitter_seconds = excluded.jitter_seconds,
    missed = excluded.missed,
    next_run_at = CASE WHEN job_schedules.cron = excluded.cron
                        AND job_schedules.timezone = excluded.timezone
                        AND job_schedules.next_run_at IS NOT NULL
                       THEN job_schedules.next_run_at
                       ELSE excluded.next_run_at END,
    max_catch_up = excluded.max_catch_up, tenant = excluded.tenant, updated_at = now()
RETURNING (xmax = 0) AS created
