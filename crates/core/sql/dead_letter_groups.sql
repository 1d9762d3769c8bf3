-- Dead letters grouped by job type and error code, largest group first, each
-- with the newest failure's message as a sample (one index probe per group).
SELECT g.job_type, g.last_error_code, g.jobs, g.first_failed_at, g.last_failed_at,
       sample.last_error AS sample_error
FROM (
    SELECT job_type, last_error_code, count(*) AS jobs,
           min(finished_at) AS first_failed_at, max(finished_at) AS last_failed_at
    FROM jobs
    WHERE state = 'FAILED'
    GROUP BY job_type, last_error_code
) g
LEFT JOIN LATERAL (
    SELECT j.last_error
    FROM jobs j
    WHERE j.state = 'FAILED'
      AND j.job_type = g.job_type
      AND j.last_error_code IS NOT DISTINCT FROM g.last_error_code
    ORDER BY j.finished_at DESC
    LIMIT 1
) sample ON true
ORDER BY g.jobs DESC, g.job_type, g.last_error_code
