-- Whether a queue was declared (job_queues) or holds a job in the hot table:
-- the queues `queue_overview.sql` lists. Stops at the first job found.
SELECT EXISTS (SELECT 1 FROM job_queues WHERE queue = $1)
    OR EXISTS (SELECT 1 FROM jobs WHERE queue = $1)
