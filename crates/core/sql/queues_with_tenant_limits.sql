-- Every queue with a per-tenant limit: a default for its tenants, one
-- tenant's override, or slot rows (a cap removed while tenants still held
-- slots, until the reconciler's sweep forgets them). A cap always has a
-- job_queues row behind it, so slot rows are looked for per queue there,
-- one probe of their primary key each, not by reading them all.
SELECT q.queue FROM job_queues q
WHERE q.tenant_max_running IS NOT NULL
   OR q.tenant_max_queued IS NOT NULL
   OR q.tenant_rate_jobs IS NOT NULL
   OR EXISTS (SELECT 1 FROM job_tenant_slots s WHERE s.queue = q.queue)
UNION
SELECT t.queue FROM job_tenants t
ORDER BY queue
