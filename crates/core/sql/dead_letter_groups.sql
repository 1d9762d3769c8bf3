-- Dead letters grouped by job type and error code, largest group first.
SELECT job_type, last_error_code, count(*) AS jobs,
       min(finished_at) AS first_failed_at, max(finished_at) AS last_failed_at
FROM jobs
WHERE state = 'FAILED'
GROUP BY job_type, last_error_code
ORDER BY count(*) DESC, job_type, last_error_code
