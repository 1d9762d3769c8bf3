-- Every schedule (or the one named $1), by name.
SELECT name, cron, timezone, job_type, queue, payload, priority, max_attempts,
       jitter_seconds, missed, max_catch_up, paused, next_run_at, last_fired_for,
       last_fired_at, created_at, updated_at, tenant
FROM job_schedules
WHERE $1::text IS NULL OR name = $1
ORDER BY name
