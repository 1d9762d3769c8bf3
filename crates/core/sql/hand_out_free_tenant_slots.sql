-- Every free slot of a capped tenant on a broker queue goes to that
-- tenant's next due job, with a wake-up (reason `reconcile`). Returns how
-- many jobs were woken (0 when no tenant is capped: no slot rows).
SELECT coalesce(jobwire_hand_out_free_slots(array_agg(f.queue), array_agg(f.tenant), 'reconcile'), 0)
FROM (SELECT DISTINCT s.queue, s.tenant
      FROM job_tenant_slots s
      JOIN job_queues q ON q.queue = s.queue AND q.dispatch = 'broker' AND NOT q.paused
      WHERE s.job_id IS NULL) f
