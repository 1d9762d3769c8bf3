-- Set (or, with a NULL $3, remove) the running-jobs cap of tenant $2 on
-- queue $1, or with a NULL $2 the queue's default for every tenant; then
-- keep job_queues.tenant_capped in step (the plain claim reads it).
WITH queue_row AS (
    INSERT INTO job_queues (queue, tenant_max_running)
    VALUES ($1, CASE WHEN $2::text IS NULL THEN $3::integer END)
    ON CONFLICT (queue) DO UPDATE
    SET tenant_max_running = CASE WHEN $2::text IS NULL THEN $3::integer
                                  ELSE job_queues.tenant_max_running END,
        updated_at = now()
    RETURNING queue
),
override_set AS (
    INSERT INTO job_tenants (queue, tenant, max_running)
    SELECT $1, $2::text, $3::integer
    WHERE $2::text IS NOT NULL AND $3::integer IS NOT NULL
    ON CONFLICT (queue, tenant) DO UPDATE
    SET max_running = excluded.max_running, updated_at = now()
    RETURNING 1
),
override_removed AS (
    DELETE FROM job_tenants
    WHERE queue = $1 AND tenant = $2::text AND $3::integer IS NULL
    RETURNING 1
)
SELECT 1 FROM queue_row
