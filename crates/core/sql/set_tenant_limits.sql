-- Set the per-tenant limits of queue $1: with a NULL $2 the queue's
-- defaults for every tenant, else tenant $2's overrides. $4 is the cap on
-- running jobs; $5 the cap on waiting jobs and $6/$7 the enqueue rate (jobs
-- per seconds), which are kept as they are when $3 (running cap only) is
-- true. NULL removes a limit. A tenant's override row left with no limit is
-- deleted by the caller's next statement.
WITH queue_row AS (
    INSERT INTO job_queues (queue, tenant_max_running, tenant_max_queued,
                            tenant_rate_jobs, tenant_rate_seconds)
    VALUES ($1,
            CASE WHEN $2::text IS NULL THEN $4::integer END,
            CASE WHEN $2::text IS NULL AND NOT $3::boolean THEN $5::integer END,
            CASE WHEN $2::text IS NULL AND NOT $3::boolean THEN $6::integer END,
            CASE WHEN $2::text IS NULL AND NOT $3::boolean THEN $7::integer END)
    ON CONFLICT (queue) DO UPDATE
    SET tenant_max_running = CASE WHEN $2::text IS NULL THEN $4::integer
                                  ELSE job_queues.tenant_max_running END,
        tenant_max_queued = CASE WHEN $2::text IS NULL AND NOT $3::boolean THEN $5::integer
                                 ELSE job_queues.tenant_max_queued END,
        tenant_rate_jobs = CASE WHEN $2::text IS NULL AND NOT $3::boolean THEN $6::integer
                                ELSE job_queues.tenant_rate_jobs END,
        tenant_rate_seconds = CASE WHEN $2::text IS NULL AND NOT $3::boolean THEN $7::integer
                                   ELSE job_queues.tenant_rate_seconds END,
        updated_at = now()
    RETURNING queue
),
override_row AS (
    INSERT INTO job_tenants (queue, tenant, max_running, max_queued, rate_jobs, rate_seconds)
    SELECT $1, $2::text, $4::integer, $5::integer, $6::integer, $7::integer
    WHERE $2::text IS NOT NULL
    ON CONFLICT (queue, tenant) DO UPDATE
    SET max_running = excluded.max_running,
        max_queued = CASE WHEN $3::boolean THEN job_tenants.max_queued ELSE excluded.max_queued END,
        rate_jobs = CASE WHEN $3::boolean THEN job_tenants.rate_jobs ELSE excluded.rate_jobs END,
        rate_seconds = CASE WHEN $3::boolean THEN job_tenants.rate_seconds ELSE excluded.rate_seconds END,
        updated_at = now()
    RETURNING 1
)
SELECT 1 FROM queue_row
