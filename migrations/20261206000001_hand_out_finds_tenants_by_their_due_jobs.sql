-- jobwire schema: free slots are handed to tenants found by their due jobs.
--
-- The reconciler's hand-out and a queue's resume hand a capped tenant's
-- free slots to its due jobs on a broker queue. They found those tenants
-- by their free slot rows, so a tenant without rows was passed over: a due
-- job whose wake-up was lost or met a paused queue (a delayed job that
-- became due, a replayed job: neither makes sure of slot rows) would wait
-- for the safety net. That could happen to a tenant never given rows;
-- once the slot rows of idle tenants are deleted (migration
-- 20261206000002), to any tenant that was idle. Both now find the tenants
-- by their due jobs without a slot (jobwire_hand_out_to_waiting_tenants)
-- and make sure of their rows first.

-- Hand the free slots of every capped tenant of `p_queues` (broker queues;
-- others are ignored) that has a due job without a slot to its next due
-- jobs, with their wake-ups (reason `p_reason`), making sure of the
-- tenant's slot rows first. Returns how many jobs were woken. Does not
-- look at whether a queue is paused: the caller chooses the queues.
CREATE FUNCTION jobwire_hand_out_to_waiting_tenants(p_queues text[], p_reason text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    queues  text[];
    tenants text[];
BEGIN
    -- Every tenant with waiting jobs on those queues (a skip scan of
    -- jobs_tenant_claimable_idx per queue), kept if capped and one of its
    -- due jobs holds no slot. Scalar subqueries in the index's order, not
    -- EXISTS: see jobwire_claim_capped (migration 20261205000001).
    WITH RECURSIVE walk(queue, tenant) AS (
        SELECT q.queue,
               (SELECT j.tenant FROM jobs j
                WHERE j.queue = q.queue AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.tenant IS NOT NULL
                ORDER BY j.tenant LIMIT 1)
        FROM job_queues q
        WHERE q.queue = ANY (p_queues) AND q.dispatch = 'broker'
        UNION ALL
        SELECT w.queue,
               (SELECT j.tenant FROM jobs j
                WHERE j.queue = w.queue AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.tenant > w.tenant
                ORDER BY j.tenant LIMIT 1)
        FROM walk w WHERE w.tenant IS NOT NULL
    )
    SELECT array_agg(w.queue), array_agg(w.tenant) INTO queues, tenants
    FROM walk w
    WHERE w.tenant IS NOT NULL
      AND jobwire_tenant_cap(w.queue, w.tenant) IS NOT NULL
      AND (SELECT j.job_id FROM jobs j
           WHERE j.queue = w.queue AND j.tenant >= w.tenant AND j.tenant <= w.tenant
             AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
             AND j.tenant_slot IS NULL
           ORDER BY j.queue, j.tenant, j.priority, j.run_after
           LIMIT 1) IS NOT NULL;
    IF queues IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM jobwire_ensure_tenant_slots(g.queue, g.tenant, jobwire_tenant_cap(g.queue, g.tenant))
    FROM unnest(queues, tenants) AS g(queue, tenant);
    RETURN jobwire_hand_out_free_slots(queues, tenants, p_reason);
END;
$$;
