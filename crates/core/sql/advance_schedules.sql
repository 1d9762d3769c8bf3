-- After firing a batch of schedules: each one's next nominal instant (NULL
-- if none) and the last occurrence fired (kept when nothing fired).
UPDATE job_schedules s
SET next_run_at = a.next_run_at,
    last_fired_for = coalesce(a.fired_for, s.last_fired_for),
    last_fired_at = CASE WHEN a.fired_for IS NULL THEN s.last_fired_at ELSE now() END,
    updated_at = now()
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS a(name, next_run_at, fired_for)
WHERE s.name = a.name
