-- The reconciler's pass: give back the tenant slots held by waiting jobs of
-- every queue on the PostgreSQL path (migration 20261206000003). Reads the
-- slot rows of those queues: none on a queue never capped.
SELECT coalesce(jobwire_release_handed_slots(coalesce(array_agg(q.queue), '{}')), 0)
FROM job_queues q
WHERE q.dispatch = 'postgres'
