-- jobwire schema: a capped claim pairs its jobs with its slots in one pass.
--
-- The claim (jobwire_claim_capped, as of migration 20261203000006) gave
-- the k-th chosen job of a tenant the tenant's k-th locked free slot by a
-- join on (tenant, k). The planner made it a merge join on the tenant
-- alone, with k as a filter: every job of a claim was compared with every
-- slot of its tenant, 9,900 pairs dropped for a claim of 100 jobs. The
-- slots are now one array per tenant, lowest first, and the k-th job takes
-- the array's k-th element (docs/benchmarks.md, "A capped claim pairs its
-- jobs and slots in one pass; every tenant's slot rows read on each claim").
--
-- Nothing else changes: the same jobs, slots and order as before.

CREATE OR REPLACE FUNCTION jobwire_claim_capped(p_queue text, p_limit integer, p_owner text,
                                     p_lease_ms bigint, p_due_ms bigint)
RETURNS SETOF jobs
LANGUAGE plpgsql
-- Planned once per session: re-planning the claim on every call (a custom
-- plan for each set of arguments) cost more than running it.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    due      timestamptz := now() - p_due_ms * interval '1 millisecond';
    waiting  text[];
    untenanted boolean;
    broker   boolean;
    paused   boolean;
BEGIN
    -- No row: a queue never configured, claimed here as if uncapped (a
    -- claimer that remembers another database's queue of that name).
    SELECT q.dispatch = 'broker', q.paused INTO broker, paused
    FROM job_queues q WHERE q.queue = p_queue;
    IF paused THEN
        RETURN;
    END IF;
    broker := coalesce(broker, false);
    -- Every tenant with waiting jobs: a skip scan of jobs_tenant_claimable_idx.
    WITH RECURSIVE walk(tenant) AS (
        (SELECT j.tenant FROM jobs j
         WHERE j.queue = p_queue AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.tenant IS NOT NULL
         ORDER BY j.tenant LIMIT 1)
        UNION ALL
        SELECT (SELECT j.tenant FROM jobs j
                WHERE j.queue = p_queue AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.tenant > w.tenant
                ORDER BY j.tenant LIMIT 1)
        FROM walk w WHERE w.tenant IS NOT NULL
    )
    SELECT array_agg(w.tenant) FILTER (WHERE w.tenant IS NOT NULL) INTO waiting FROM walk w;
    -- A scalar subquery in the index's order, not EXISTS: the planner drops
    -- an EXISTS subquery's ORDER BY and LIMIT and, expecting many matches,
    -- scanned the whole table for the first one (13 ms a claim among
    -- 40,000 jobs, none of them untenanted); this walks
    -- jobs_tenant_claimable_idx from (queue, NULL) and stops at the first.
    untenanted := (SELECT j.job_id FROM jobs j
                   WHERE j.queue = p_queue AND j.state IN ('QUEUED', 'RETRY_WAIT')
                     AND j.tenant IS NULL AND j.run_after <= due
                   ORDER BY j.queue, j.tenant, j.priority, j.run_after
                   LIMIT 1) IS NOT NULL;
    -- A tenant seen for the first time (or whose cap was raised) gets its
    -- slot rows; for the others this is one index probe.
    PERFORM jobwire_ensure_tenant_slots(p_queue, c.tenant, c.cap)
    FROM (SELECT t AS tenant, jobwire_tenant_cap(p_queue, t) AS cap FROM unnest(waiting) t) c
    WHERE c.cap IS NOT NULL;

    RETURN QUERY
    WITH caps AS (
        SELECT t AS tenant, jobwire_tenant_cap(p_queue, t) AS cap FROM unnest(waiting) t
    ),
    -- How many slots each capped tenant can use now: its due jobs without
    -- a slot, counted only up to what one claim could take. Read, not
    -- locked: capped_jobs below locks the jobs it takes.
    usable AS (
        SELECT c.tenant, c.cap, u.n
        FROM caps c
        CROSS JOIN LATERAL (
            SELECT count(*) AS n
            FROM (SELECT 1
                  FROM jobs j
                  WHERE j.queue = p_queue AND j.tenant >= c.tenant AND j.tenant <= c.tenant
                    AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
                    AND j.tenant_slot IS NULL
                  ORDER BY j.tenant, j.priority, j.run_after, j.job_id
                  LIMIT least(c.cap, p_limit)) w
        ) u
        WHERE c.cap IS NOT NULL
    ),
    -- That many free slots per tenant, lowest first: locking a row writes
    -- it, and a tenant with one waiting job needs one slot, not all its
    -- free ones (migration 20261202000005).
    locked_free AS (
        SELECT u.tenant, s.slot
        FROM usable u
        CROSS JOIN LATERAL (
            SELECT s.slot
            FROM job_tenant_slots s
            WHERE s.queue = p_queue AND s.tenant = u.tenant
              AND s.job_id IS NULL AND s.slot <= u.cap
            ORDER BY s.slot
            LIMIT u.n
            FOR UPDATE OF s SKIP LOCKED
        ) s
    ),
    capped_jobs AS (
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM (SELECT f.tenant, count(*) AS n FROM locked_free f GROUP BY f.tenant) f
        CROSS JOIN LATERAL (
            SELECT j.job_id, j.tenant, j.priority, j.run_after
            FROM jobs j
            -- The tenant as a range, not `=`, and in the order: see
            -- migration 20261202000003.
            WHERE j.queue = p_queue AND j.tenant >= f.tenant AND j.tenant <= f.tenant
              AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
              AND j.tenant_slot IS NULL
            ORDER BY j.tenant, j.priority, j.run_after, j.job_id
            LIMIT least(f.n, p_limit)
            FOR UPDATE OF j SKIP LOCKED
        ) j
    ),
    open_jobs AS (
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM caps c
        CROSS JOIN LATERAL (
            SELECT j.job_id, j.tenant, j.priority, j.run_after
            FROM jobs j
            WHERE j.queue = p_queue AND j.tenant >= c.tenant AND j.tenant <= c.tenant
              AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
            ORDER BY j.tenant, j.priority, j.run_after, j.job_id
            LIMIT p_limit
            FOR UPDATE OF j SKIP LOCKED
        ) j
        WHERE c.cap IS NULL
    ),
    reserved_jobs AS (
        -- Broker queues only: waiting jobs whose slot was handed to them
        -- (their wake-up is on the way, or was lost: the safety net's case).
        -- Asked for overdue jobs, take one only once it has held its slot
        -- that long (the hand-over stamps updated_at): before, its wake-up
        -- is on the way, however long it waited for the slot.
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM job_tenant_slots s
        JOIN jobs j ON j.job_id = s.job_id
        WHERE broker AND s.queue = p_queue AND j.tenant_slot IS NOT NULL
          AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
          AND (p_due_ms = 0 OR j.updated_at <= due)
        FOR UPDATE OF j SKIP LOCKED
    ),
    untenanted_jobs AS (
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM jobs j
        WHERE untenanted AND j.queue = p_queue AND j.tenant IS NULL
          AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
        ORDER BY j.queue, j.tenant, j.priority, j.run_after, j.job_id
        LIMIT p_limit
        FOR UPDATE OF j SKIP LOCKED
    ),
    ranked AS (
        SELECT c.*, row_number() OVER (PARTITION BY c.tenant
                                       ORDER BY c.priority, c.run_after, c.job_id) AS turn
        FROM (SELECT * FROM capped_jobs
              UNION ALL SELECT * FROM open_jobs
              UNION ALL SELECT * FROM reserved_jobs
              UNION ALL SELECT * FROM untenanted_jobs) c
    ),
    picked AS (
        SELECT r.job_id, r.tenant, r.turn,
               r.job_id IN (SELECT x.job_id FROM reserved_jobs x) AS reserved
        FROM ranked r
        ORDER BY r.priority, r.turn, r.run_after, r.job_id
        LIMIT p_limit
    ),
    -- Each tenant's locked free slots, lowest first, as one array.
    free_slots AS (
        SELECT f.tenant, array_agg(f.slot ORDER BY f.slot) AS slots
        FROM locked_free f
        GROUP BY f.tenant
    ),
    chosen AS (
        -- The k-th picked job of a tenant that needs a slot gets its k-th
        -- locked free slot (there are at least as many: capped_jobs took
        -- no more than that); a job handed a slot keeps it. An array
        -- subscript, not a join on (tenant, k): the planner joined on the
        -- tenant alone and compared every job with every slot.
        SELECT p.job_id, p.tenant, CASE WHEN NOT p.reserved THEN fs.slots[p.n] END AS slot
        FROM (SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.reserved
                                             ORDER BY p.turn) AS n
              FROM picked p) p
        LEFT JOIN free_slots fs ON fs.tenant = p.tenant
    ),
    held AS (
        UPDATE job_tenant_slots s
        SET job_id = c.job_id
        FROM chosen c
        WHERE c.slot IS NOT NULL
          AND s.queue = p_queue AND s.tenant = c.tenant AND s.slot = c.slot
        RETURNING s.job_id
    )
    UPDATE jobs j
    SET state = 'RUNNING',
        tenant_slot = coalesce(c.slot, j.tenant_slot),
        lease_owner = p_owner,
        lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
        lease_generation = j.lease_generation + 1,
        attempt_count = j.attempt_count + 1,
        heartbeat_at = now(),
        updated_at = now()
    FROM chosen c
    WHERE j.job_id = c.job_id
    RETURNING j.*;
END;
$$;
