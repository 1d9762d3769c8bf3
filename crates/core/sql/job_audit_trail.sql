-- What operators did to one job, oldest first (at most $2 entries).
SELECT action, actor, reason, details, created_at
FROM job_audit
WHERE job_id = $1
ORDER BY created_at, id
LIMIT $2
