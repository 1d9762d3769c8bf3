-- Pause ($2 = true) or resume schedule $1. Resuming restarts it at $3, the
-- next occurrence after now: occurrences that fell in the pause were not
-- missed, they were not wanted. Resuming a schedule that is not paused
-- changes nothing. Returns its name.
UPDATE job_schedules
SET next_run_at = CASE WHEN NOT $2 AND paused THEN $3 ELSE next_run_at END,
    paused = $2,
    updated_at = now()
WHERE name = $1
RETURNING name
