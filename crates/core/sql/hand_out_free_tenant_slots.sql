-- Every capped tenant of a broker queue (not paused) with a due job that
-- holds no slot: its free slots go to its next due jobs, with wake-ups
-- (reason `reconcile`), its slot rows made first if it has none. Returns
-- how many jobs were woken (0 when no broker queue is capped).
SELECT coalesce(jobwire_hand_out_to_waiting_tenants(array_agg(q.queue), 'reconcile'), 0)
FROM job_queues q
WHERE q.dispatch = 'broker' AND NOT q.paused AND q.tenant_capped
