-- Retention: delete up to $2 rows of job_outbox_dead older than $1 ms, oldest first
-- (index on failed_at), skipping rows another retention loop is deleting.
DELETE FROM job_outbox_dead
WHERE id IN (
    SELECT id
    FROM job_outbox_dead
    WHERE failed_at < now() - $1 * interval '1 millisecond'
    ORDER BY failed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
