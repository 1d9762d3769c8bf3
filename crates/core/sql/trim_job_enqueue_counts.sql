-- Retention: delete up to $2 rate-counter rows whose window started more
-- than $1 ms ago (a window is at most a day, so after two days a row
-- counts for nothing), skipping rows another retention loop is deleting.
-- A live session's row is only ever locked by that session's enqueue: if it
-- is, it is in use and skipped.
DELETE FROM job_enqueue_counts
WHERE (queue, tenant, backend) IN (
    SELECT queue, tenant, backend
    FROM job_enqueue_counts
    WHERE window_start < now() - $1 * interval '1 millisecond'
    ORDER BY window_start
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
