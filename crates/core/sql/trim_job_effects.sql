-- Retention: delete up to $2 rows of job_effects older than $1 ms, oldest first
-- (index on created_at), skipping rows another retention loop is deleting.
DELETE FROM job_effects
WHERE effect_key IN (
    SELECT effect_key
    FROM job_effects
    WHERE created_at < now() - $1 * interval '1 millisecond'
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
