-- Take up to $1 due schedules for this scheduler: rows another scheduler
-- holds are skipped, so any number of schedulers share the work and none
-- waits. Returns the database clock with them (every decision uses it).
SELECT name, cron, timezone, job_type, queue, payload, priority, max_attempts,
       jitter_seconds, missed, max_catch_up, next_run_at, tenant, now() AS db_now
FROM job_schedules
WHERE NOT paused AND next_run_at IS NOT NULL AND next_run_at <= now()
ORDER BY next_run_at
LIMIT $1
FOR UPDATE SKIP LOCKED
