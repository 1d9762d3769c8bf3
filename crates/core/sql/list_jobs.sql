-- One page of jobs, newest first, from the hot table and history together.
-- Keyset pagination on job_id (UUIDv7, so time-ordered): $4 is the last id
-- of the previous page. Optional filters: state ($1), queue ($2), job type
-- ($3), last error code ($8), tenant ($9), an id prefix as the range of ids it covers ($6 to $7: a range of the
-- primary key, so a prefix is as cheap as a page). Each branch walks its primary key backwards and stops after $5 rows,
-- so a page costs the same on page one as on page ten thousand.
SELECT * FROM (
    (SELECT job_id, queue, job_type, priority, payload::text AS payload, state, attempt_count, max_attempts,
            run_after, lease_owner, lease_expires_at, lease_generation, heartbeat_at,
            dedup_key, last_error_code, last_error, created_at, updated_at, finished_at,
       schedule_name, scheduled_for, lease_expired_at, tenant,
            false AS archived
     FROM jobs
     WHERE ($1::text IS NULL OR state = $1)
       AND ($2::text IS NULL OR queue = $2)
       AND ($3::text IS NULL OR job_type = $3)
       AND ($8::text IS NULL OR last_error_code = $8)
       AND ($9::text IS NULL OR tenant = $9)
       AND ($4::uuid IS NULL OR job_id < $4)
       AND job_id BETWEEN coalesce($6::uuid, '00000000-0000-0000-0000-000000000000')
                      AND coalesce($7::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
     ORDER BY job_id DESC
     LIMIT $5)
    UNION ALL
    (SELECT job_id, queue, job_type, priority, payload::text AS payload, state, attempt_count, max_attempts,
            run_after, lease_owner, lease_expires_at, lease_generation, heartbeat_at,
            dedup_key, last_error_code, last_error, created_at, updated_at, finished_at,
       schedule_name, scheduled_for, lease_expired_at, tenant,
            true AS archived
     FROM jobs_history
     WHERE ($1::text IS NULL OR state = $1)
       AND ($2::text IS NULL OR queue = $2)
       AND ($3::text IS NULL OR job_type = $3)
       AND ($8::text IS NULL OR last_error_code = $8)
       AND ($9::text IS NULL OR tenant = $9)
       AND ($4::uuid IS NULL OR job_id < $4)
       AND job_id BETWEEN coalesce($6::uuid, '00000000-0000-0000-0000-000000000000')
                      AND coalesce($7::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
     ORDER BY job_id DESC
     LIMIT $5)
) page
ORDER BY job_id DESC
LIMIT $5
