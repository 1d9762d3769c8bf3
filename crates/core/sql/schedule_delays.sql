-- How far behind each active schedule is: seconds since its next occurrence
-- was due (0 while it is not due yet). A scheduler that keeps up holds these
-- under its interval; a growing one means no scheduler runs or they cannot
-- keep up.
SELECT name,
       greatest(extract(epoch FROM now() - next_run_at), 0)::float8 AS delay_s
FROM job_schedules
WHERE NOT paused AND next_run_at IS NOT NULL
ORDER BY name
