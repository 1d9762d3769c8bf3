-- jobwire schema: the slot rows of idle tenants are forgotten.
--
-- A tenant gets its slot rows (`job_tenant_slots`, one per slot of its
-- cap) the first time one of its jobs is claimed or handed a slot on a
-- capped queue, and nothing deleted them: a queue that had seen 1,000
-- tenants kept 1,000 sets of rows, all of which a capped claim's write of
-- the slots it took could read (docs/benchmarks.md, "A capped claim pairs
-- its jobs and slots in one pass; every tenant's slot rows read on each
-- claim"; "Idle tenants' slot rows are forgotten").
--
-- jobwire_forget_idle_tenant_slots deletes the rows of tenants that hold
-- no slot and have no waiting job (the reconciler calls it every few
-- minutes). The rows come back the next time the tenant needs a slot:
-- every statement that hands one out first makes sure they exist
-- (jobwire_ensure_tenant_slots) and then locks the one it takes.
--
-- Between those two steps the rows must not go. So making sure takes a
-- shared advisory lock per queue, held until the transaction ends, and the
-- sweep takes it exclusively: it deletes nothing of a queue while any
-- transaction is between making sure of a tenant's slots and taking them,
-- and a transaction that makes sure while the sweep holds the lock waits
-- for it, then sees the rows gone and creates them again. The key follows
-- the wake token's convention (migration 20261201000008):
-- (hashtext('jobwire.tenant_slots'), hashtext(queue)). One lock per queue,
-- not per tenant: a claim makes sure of every waiting tenant's slots, and
-- a lock per tenant would put thousands of locks in PostgreSQL's shared
-- lock table for one claim.
--
-- A tenant's rows are deleted all together or not at all: the claim
-- re-creates a tenant's rows only when its highest slot is missing, so a
-- tenant left with some of its rows would run below its cap until the
-- next sweep. This relies on jobwire_ensure_tenant_slots being the only
-- statement that inserts slot rows.
--
-- The claim's comment "A tenant seen for the first time (or whose cap was
-- raised) gets its slot rows" (migrations 20261203000006 and
-- 20261205000001, which cannot be edited once applied) now also covers a
-- tenant forgotten as idle.

CREATE OR REPLACE FUNCTION jobwire_ensure_tenant_slots(p_queue text, p_tenant text, p_cap integer)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Until this transaction ends, the sweep of idle tenants leaves this
    -- queue's slot rows alone; if the sweep holds it, wait, and read the
    -- rows below after it has committed (a new statement, a new snapshot).
    PERFORM pg_advisory_xact_lock_shared(hashtext('jobwire.tenant_slots'), hashtext(p_queue));
    IF NOT EXISTS (SELECT 1 FROM job_tenant_slots x
                   WHERE x.queue = p_queue AND x.tenant = p_tenant AND x.slot = p_cap) THEN
        INSERT INTO job_tenant_slots (queue, tenant, slot)
        SELECT p_queue, p_tenant, s FROM generate_series(1, p_cap) s
        ON CONFLICT DO NOTHING;
    END IF;
END;
$$;

-- Delete the slot rows of those of `p_tenants` (tenants of `p_queue`) that
-- hold no slot and have no waiting job, each tenant's rows all together.
-- Returns how many tenants were forgotten, or -1 when the queue's lock
-- stayed busy: it waits at most 50 ms for it (new claims of the queue wait
-- behind it meanwhile), and a later sweep tries again. Keep `p_tenants`
-- short: claims of the queue wait while this runs (the caller sends 25 at
-- a time, about 4 ms at a cap of 48 on the development machine).
CREATE FUNCTION jobwire_forget_idle_tenant_slots(p_queue text, p_tenants text[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    prior_limit text := current_setting('lock_timeout');
    forgotten   integer;
BEGIN
    BEGIN
        PERFORM set_config('lock_timeout', '50ms', true);
        PERFORM pg_advisory_xact_lock(hashtext('jobwire.tenant_slots'), hashtext(p_queue));
        PERFORM set_config('lock_timeout', prior_limit, true);
    EXCEPTION WHEN lock_not_available THEN
        -- The block's setting is undone with it.
        RETURN -1;
    END;
    -- A new snapshot, taken with the lock held: every transaction that made
    -- sure of this queue's slots has ended, and none can start to. What is
    -- held or waiting now is seen; a job enqueued from here on waits for
    -- this transaction before it makes sure of its tenant's slots.
    WITH idle AS (
        SELECT t.tenant
        FROM unnest(p_tenants) AS t(tenant)
        WHERE NOT EXISTS (SELECT 1 FROM job_tenant_slots s
                          WHERE s.queue = p_queue AND s.tenant = t.tenant AND s.job_id IS NOT NULL)
          -- Any waiting job, due or not: a job not yet due is handed a slot
          -- when it is, by statements that expect the rows.
          AND NOT EXISTS (SELECT 1 FROM jobs j
                          WHERE j.queue = p_queue AND j.tenant = t.tenant
                            AND j.state IN ('QUEUED', 'RETRY_WAIT'))
    ),
    -- Locked, skipping rows another transaction holds (a completion's
    -- hand-over, the reconciler's hand-out, both of which may write them).
    locked AS (
        SELECT s.tenant
        FROM job_tenant_slots s
        WHERE s.queue = p_queue AND s.tenant IN (SELECT i.tenant FROM idle i)
          AND s.job_id IS NULL
        FOR UPDATE OF s SKIP LOCKED
    ),
    -- Only tenants all of whose rows were locked here, still free.
    whole AS (
        SELECT l.tenant
        FROM locked l
        GROUP BY l.tenant
        HAVING count(*) = (SELECT count(*) FROM job_tenant_slots a
                           WHERE a.queue = p_queue AND a.tenant = l.tenant)
    ),
    gone AS (
        DELETE FROM job_tenant_slots s
        USING whole w
        WHERE s.queue = p_queue AND s.tenant = w.tenant
        RETURNING s.tenant
    )
    SELECT count(DISTINCT g.tenant) INTO forgotten FROM gone g;
    RETURN forgotten;
END;
$$;

