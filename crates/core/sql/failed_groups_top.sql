-- FAILED jobs by type and error code for the metrics gauge: the $1 largest
-- groups as they are, everything else summed into one row whose type and
-- code are NULL, so the label set stays bounded however many error codes
-- handlers invent. Rides on jobs_dead_letter_idx.
WITH groups AS (
    SELECT job_type,
           coalesce(last_error_code, '') AS error_code,
           count(*) AS jobs,
           row_number() OVER (ORDER BY count(*) DESC, job_type, coalesce(last_error_code, '')) AS rank
    FROM jobs
    WHERE state = 'FAILED'
    GROUP BY job_type, coalesce(last_error_code, '')
)
SELECT CASE WHEN rank <= $1 THEN job_type END AS job_type,
       CASE WHEN rank <= $1 THEN error_code END AS error_code,
       sum(jobs)::bigint AS jobs
FROM groups
GROUP BY 1, 2
