-- The tenants of queue $1 with an override or a slot row: each one's
-- overrides, the limits in force (the override, else the queue's default),
-- its running jobs (slots held by running jobs), its starting ones (slots
-- handed to waiting jobs, on broker queues) and its waiting jobs (the
-- starting ones among them).
WITH known AS (
    SELECT t.tenant FROM job_tenants t WHERE t.queue = $1
    UNION
    SELECT DISTINCT s.tenant FROM job_tenant_slots s WHERE s.queue = $1
)
SELECT k.tenant,
       o.max_running AS override_max_running,
       jobwire_tenant_cap($1, k.tenant) AS max_running,
       o.max_queued AS override_max_queued,
       coalesce(o.max_queued, q.tenant_max_queued) AS max_queued,
       o.rate_jobs AS override_rate_jobs,
       o.rate_seconds AS override_rate_seconds,
       coalesce(o.rate_jobs, q.tenant_rate_jobs) AS rate_jobs,
       coalesce(o.rate_seconds, q.tenant_rate_seconds) AS rate_seconds,
       held.running,
       held.starting,
       (SELECT count(*) FROM jobs j
        WHERE j.queue = $1 AND j.tenant = k.tenant
          AND j.state IN ('QUEUED', 'RETRY_WAIT')) AS waiting
FROM known k
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.state IN ('RUNNING', 'CANCEL_REQUESTED')) AS running,
           count(*) FILTER (WHERE j.state IN ('QUEUED', 'RETRY_WAIT')) AS starting
    FROM job_tenant_slots s JOIN jobs j ON j.job_id = s.job_id
    WHERE s.queue = $1 AND s.tenant = k.tenant
) held
LEFT JOIN job_tenants o ON o.queue = $1 AND o.tenant = k.tenant
LEFT JOIN job_queues q ON q.queue = $1
ORDER BY k.tenant
