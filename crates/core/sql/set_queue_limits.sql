-- Set queue $1's enqueue limits: at most $2 waiting jobs, and from $3
-- waiting jobs on only jobs of priority $4 or lower (more urgent). NULL
-- removes a limit ($3 and $4 go together).
INSERT INTO job_queues (queue, max_queued, shed_depth, shed_priority)
VALUES ($1, $2, $3, $4)
ON CONFLICT (queue) DO UPDATE
SET max_queued = excluded.max_queued,
    shed_depth = excluded.shed_depth,
    shed_priority = excluded.shed_priority,
    updated_at = now()
