-- jobwire schema: a capped claim that can take nothing returns before its
-- main statement.
--
-- A worker's claim loop on a PostgreSQL-path queue polls again 1, 2, 4 ...
-- ms after a claim that found work (jobwire-loop's IdlePoll: a commit may
-- have skipped its NOTIFY). On a queue whose busy tenant is at its cap
-- those polls find nothing, and each still ran the capped claim's main
-- statement, which is planned at each call (migration 20261207000002):
-- with 10 ms jobs under a cap of 48, one worker ran 737 capped claims for
-- 208 rounds of the cap, at 4 ms each with every statement logged
-- (docs/benchmarks.md, "A cap when the jobs work").
--
-- When the claim has locked no free slot, no waiting tenant is uncapped,
-- no job without a tenant is due and the queue is not a broker's (whose
-- handed jobs the safety net may take), the main statement has no row to
-- take and nothing to write: the function now returns before it. Every
-- other claim runs exactly as before (migration 20261207000004).

CREATE OR REPLACE FUNCTION jobwire_claim_capped(p_queue text, p_limit integer, p_owner text,
                                     p_lease_ms bigint, p_due_ms bigint)
RETURNS SETOF jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    due        timestamptz := now() - p_due_ms * interval '1 millisecond';
    waiting    text[];
    cap_of     integer[];
    untenanted boolean;
    broker     boolean;
    paused     boolean;
    free_t     text[];
    free_s     integer[];
    unused     text[];
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
    SELECT array_agg(w.tenant ORDER BY w.tenant) FILTER (WHERE w.tenant IS NOT NULL) INTO waiting
    FROM walk w;
    -- Their caps, in the same order (NULL: uncapped).
    SELECT array_agg(jobwire_tenant_cap(p_queue, t.tenant) ORDER BY t.n) INTO cap_of
    FROM unnest(waiting) WITH ORDINALITY AS t(tenant, n);
    -- A scalar subquery in the index's order, not EXISTS: see migration
    -- 20261205000001.
    untenanted := (SELECT j.job_id FROM jobs j
                   WHERE j.queue = p_queue AND j.state IN ('QUEUED', 'RETRY_WAIT')
                     AND j.tenant IS NULL AND j.run_after <= due
                   ORDER BY j.queue, j.tenant, j.priority, j.run_after
                   LIMIT 1) IS NOT NULL;
    -- A tenant seen for the first time (or whose cap was raised) gets its
    -- slot rows; for the others this is one index probe.
    PERFORM jobwire_ensure_tenant_slots(p_queue, c.tenant, c.cap)
    FROM unnest(waiting, cap_of) AS c(tenant, cap)
    WHERE c.cap IS NOT NULL;

    -- For each capped tenant, as many of its free slots, lowest first, as
    -- it has due jobs holding none (counted up to what one claim could
    -- take; read, not locked): locking a row writes it, and a tenant with
    -- one waiting job needs one slot, not all its free ones.
    SELECT array_agg(f.tenant), array_agg(f.slot) INTO free_t, free_s
    FROM unnest(waiting, cap_of) AS c(tenant, cap)
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
    CROSS JOIN LATERAL (
        SELECT c.tenant, s.slot
        FROM job_tenant_slots s
        WHERE s.queue = p_queue AND s.tenant = c.tenant
          AND s.job_id IS NULL AND s.slot <= c.cap
        ORDER BY s.slot
        LIMIT u.n
        FOR UPDATE OF s SKIP LOCKED
    ) f
    WHERE c.cap IS NOT NULL;

    -- Nothing to take: no free slot locked above, no uncapped tenant and
    -- no tenantless job waiting, no handed job (PostgreSQL-path queues
    -- hand none). The statement below would return no row.
    IF free_t IS NULL AND NOT broker AND NOT untenanted
       AND array_position(cap_of, NULL) IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH caps AS (
        SELECT c.tenant, c.cap FROM unnest(waiting, cap_of) AS c(tenant, cap)
    ),
    locked_free AS (
        SELECT f.tenant, f.slot FROM unnest(free_t, free_s) AS f(tenant, slot)
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
        -- subscript, not a join on (tenant, k): see migration
        -- 20261205000001.
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

    -- On a broker queue, the slots this claim locked and left free: freed
    -- without a successor, as far as a producer that skipped them can tell.
    IF free_t IS NULL OR NOT broker THEN
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT f.tenant) INTO unused
    FROM unnest(free_t, free_s) AS f(tenant, slot)
    JOIN job_tenant_slots s ON s.queue = p_queue AND s.tenant = f.tenant AND s.slot = f.slot
    WHERE s.job_id IS NULL;
    IF unused IS NULL THEN
        RETURN;
    END IF;
    PERFORM jobwire_note_hand_out(array_fill(p_queue, ARRAY[cardinality(unused)]), unused, true);
END;
$$;
