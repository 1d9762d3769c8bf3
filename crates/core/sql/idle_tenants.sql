-- Tenants with slot rows that hold no slot and have no waiting job, by
-- queue: what jobwire_forget_idle_tenant_slots may forget (it checks each
-- again under the queue's lock). Reads every slot row once, locks nothing.
SELECT s.queue, s.tenant
FROM job_tenant_slots s
GROUP BY s.queue, s.tenant
HAVING bool_and(s.job_id IS NULL)
   AND NOT EXISTS (SELECT 1 FROM jobs j
                   WHERE j.queue = s.queue AND j.tenant = s.tenant
                     AND j.state IN ('QUEUED', 'RETRY_WAIT'))
ORDER BY s.queue, s.tenant
