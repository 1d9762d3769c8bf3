-- How far down one page of a filtered jobs list reads: in each table, the
-- id $4 rows below $1 (within the id range $2 to $3), and the higher of the
-- two. NULL when both tables hold fewer rows than that: the page reads to
-- the end. Only the primary keys are walked (index-only where the
-- visibility map allows); bounding the page keeps a filter that matches
-- nothing from reading the whole table.
SELECT greatest(
    (SELECT job_id FROM jobs
     WHERE ($1::uuid IS NULL OR job_id < $1)
       AND job_id BETWEEN coalesce($2::uuid, '00000000-0000-0000-0000-000000000000')
                      AND coalesce($3::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
     ORDER BY job_id DESC
     OFFSET $4 - 1 LIMIT 1),
    (SELECT job_id FROM jobs_history
     WHERE ($1::uuid IS NULL OR job_id < $1)
       AND job_id BETWEEN coalesce($2::uuid, '00000000-0000-0000-0000-000000000000')
                      AND coalesce($3::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
     ORDER BY job_id DESC
     OFFSET $4 - 1 LIMIT 1)
) AS floor
