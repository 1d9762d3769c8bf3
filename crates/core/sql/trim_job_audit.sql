-- Retention: delete up to $2 rows of job_audit older than $1 ms, oldest first
-- (index on created_at), skipping rows another retention loop is deleting.
DELETE FROM job_audit
WHERE id IN (
    SELECT id
    FROM job_audit
    WHERE created_at < now() - $1 * interval '1 millisecond'
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
