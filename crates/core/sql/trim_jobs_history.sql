-- Retention: delete up to $2 rows of jobs_history older than $1 ms, oldest first
-- (index on archived_at), skipping rows another retention loop is deleting.
DELETE FROM jobs_history
WHERE job_id IN (
    SELECT job_id
    FROM jobs_history
    WHERE archived_at < now() - $1 * interval '1 millisecond'
    ORDER BY archived_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
