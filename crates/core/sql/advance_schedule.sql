-- After firing schedule $1: its next nominal instant ($2, NULL if none) and
-- the last occurrence fired ($3, kept when nothing fired).
UPDATE job_schedules
SET next_run_at = $2,
    last_fired_for = coalesce($3, last_fired_for),
    last_fired_at = CASE WHEN $3 IS NULL THEN last_fired_at ELSE now() END,
    updated_at = now()
WHERE name = $1
