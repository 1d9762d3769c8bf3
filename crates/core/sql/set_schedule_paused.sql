-- Pause ($2 = true) or resume schedule $1. Resuming restarts it at $3, the
-- next occurrence after now: occurrences that fell in the pause were not
-- missed, they were not wanted. Returns its name.
UPDATE job_schedules
SET paused = $2,
    next_run_at = CASE WHEN $2 THEN next_run_at ELSE $3 END,
    updated_at = now()
WHERE name = $1
RETURNING name
