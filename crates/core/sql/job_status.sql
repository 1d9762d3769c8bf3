-- The public view of one job, from the hot table or, once archived, history.
SELECT job_id, queue, job_type, priority, payload::text AS payload, state, attempt_count, max_attempts,
       run_after, lease_owner, lease_expires_at, lease_generation, heartbeat_at,
       dedup_key, last_error_code, last_error, created_at, updated_at, finished_at,
       schedule_name, scheduled_for, lease_expired_at, tenant,
       false AS archived
FROM jobs WHERE job_id = $1
UNION ALL
SELECT job_id, queue, job_type, priority, payload::text AS payload, state, attempt_count, max_attempts,
       run_after, lease_owner, lease_expires_at, lease_generation, heartbeat_at,
       dedup_key, last_error_code, last_error, created_at, updated_at, finished_at,
       schedule_name, scheduled_for, lease_expired_at, tenant,
       true AS archived
FROM jobs_history WHERE job_id = $1
LIMIT 1
