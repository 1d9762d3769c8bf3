-- Queue $1's enqueue limits and per-tenant defaults (no row: none).
SELECT max_queued, shed_depth, shed_priority, tenant_max_running, tenant_max_queued,
       tenant_rate_jobs, tenant_rate_seconds
FROM job_queues
WHERE queue = $1
