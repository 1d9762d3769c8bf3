-- The tenant caps of queue $1: every tenant with an override or a slot row,
-- its override, the cap in force, its running jobs (slots held by running
-- jobs) and its waiting jobs.
WITH known AS (
    SELECT t.tenant FROM job_tenants t WHERE t.queue = $1
    UNION
    SELECT DISTINCT s.tenant FROM job_tenant_slots s WHERE s.queue = $1
)
SELECT k.tenant,
       o.max_running AS override_max_running,
       jobwire_tenant_cap($1, k.tenant) AS max_running,
       (SELECT count(*) FROM job_tenant_slots s JOIN jobs j ON j.job_id = s.job_id
        WHERE s.queue = $1 AND s.tenant = k.tenant
          AND j.state IN ('RUNNING', 'CANCEL_REQUESTED')) AS running,
       (SELECT count(*) FROM jobs j
        WHERE j.queue = $1 AND j.tenant = k.tenant
          AND j.state IN ('QUEUED', 'RETRY_WAIT')) AS waiting
FROM known k
LEFT JOIN job_tenants o ON o.queue = $1 AND o.tenant = k.tenant
ORDER BY k.tenant
