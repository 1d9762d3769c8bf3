-- jobwire schema: a capped tenant's job enqueued while one of its slots
-- is being freed is handed that slot.
--
-- On a broker queue a capped tenant's waiting job gets a wake-up only
-- with a slot: from its enqueue, when a slot of its tenant is free, or
-- from the completion that frees a slot, which hands it to the tenant's
-- next waiting job. Each looked only at what its snapshot showed, so the
-- two could miss each other:
--
-- 1. A producer enqueues job N for tenant T in its transaction. T's
--    slots are all held; N gets none and no wake-up.
-- 2. Before the producer commits, a worker completes T's running job.
--    The completion looks for T's next waiting job; N is not committed,
--    so it sees none, and frees the slot.
-- 3. The producer commits. N waits with a free slot and no wake-up: for
--    the reconciler's hand-out (10 s by default), or for ever in a
--    process without one.
--
-- The same happened when the producer committed while the completion's
-- statement, whose snapshot was older, was still running. Enqueueing in
-- the business change's transaction is how jobwire is meant to be used,
-- and a producer's transaction of any length opened the window (the test
-- `tenants_come_and_go_under_a_running_sweep_without_a_stranded_job`
-- caught it rarely, with single-statement enqueues).
--
-- Now both sides hand out as their transaction commits, and meet at a
-- lock there, so that whichever comes second reads with a snapshot taken
-- after the first committed:
--
-- * An enqueue of a capped tenant's due job on a broker queue notes the
--   tenant in `job_tenant_hand_outs`. Freeing a broker queue's slot
--   without handing it on notes the tenant there too, marked `freed`:
--   the completion statement (finish_many.sql) for the slots it ends, and
--   jobwire_give_back_tenant_slot for every other way out (a sweep, a
--   cancel, a hand edit, a deleted row).
-- * A deferred constraint trigger on that table runs once per
--   transaction, at its commit: it takes the tenants' locks, shared for
--   a producer and exclusive for a transaction that freed a slot, then
--   hands the free slots to the jobs waiting now (new statements, new
--   snapshots). A producer's lock is held only from there to its commit,
--   not through the rest of a business transaction, and producers do not
--   wait for each other; a freed slot's hand-out waits for producers
--   between their hand-out and their commit, and a producer that comes
--   after waits for the freeing transaction's commit, then sees the slot
--   free.
-- * Every hand-out (also the reconciler's and a resume's) holds its
--   tenants' locks shared until its transaction ends: a job it locks
--   and cannot give a slot is not passed over by a freed slot's hand-out.
--   A transaction must not wait for a row lock while it holds one of
--   these: the row's holder may be a freeing transaction waiting at its
--   commit for this lock. Every hand-out locks rows with SKIP LOCKED, and
--   a queue's resume now hands out after its last row write.
-- * A transaction's later statements note their tenants too, but the
--   hand-out runs once for all of them: each note counts itself in a
--   transaction-local setting, and a firing that finds nothing new
--   returns at once (a trigger event is queued per note, and each used to
--   read the table again).
-- * Slot rows are made sure of before the locks, as the reconciler does,
--   and only the missing ones are inserted: inserting over an existing
--   slot row waits for a transaction that is changing it, which may be a
--   completion waiting for this producer's lock.
--
-- Left as it was: a wake-up claim of a job holding no slot (a delayed
-- job's or a retry's own wake-up) that finds the tenant at its cap while a
-- completion, which skipped the job the claim had locked, frees a slot.
-- The job waits for the reconciler's hand-out. Taking the lock in the
-- claim closed that, but the claim waits for other jobs' row locks while
-- it would hold it, which deadlocked with a completion.
--
-- The locks are per bucket, 128 per database, of (queue, tenant) pairs:
-- a transaction enqueueing for thousands of tenants takes at most 128,
-- where a lock per tenant could fill PostgreSQL's shared lock table. Two
-- tenants in one bucket only wait for each other's commits. A transaction
-- takes all its buckets at once, in ascending order, so no two wait for
-- each other's. The key follows the wake token's convention (migration
-- 20261201000008): (hashtext('jobwire.tenant_hand_out'), bucket).
--
-- A hand-out also no longer holds a slot it has no job for. It locked
-- every free slot of a tenant before looking for jobs, and kept the
-- locks it found no job for until its transaction ended: a second
-- producer's hand-out for the same tenant skipped those slots and left
-- its own job without one. It now locks a job first and then a slot. And
-- it takes a job as due by the clock, not by its transaction's start: a
-- transaction that started before a producer is older than the producer's
-- job.

-- The tenants of capped broker queues whose due jobs this transaction
-- inserted (`freed` false) or whose slots it freed without handing them
-- on (`freed` true), one row per statement; read and deleted by the
-- transaction itself as it commits, so no other transaction sees a row
-- but deleted ones.
-- Unlogged: a row never outlives its transaction. Found by its
-- transaction's id, through an index: the table holds every earlier
-- transaction's deleted row until it is vacuumed, and a scan of them on
-- each commit cost a capped enqueue a quarter of its rate (measured with
-- pgbench, docs/benchmarks.md).
CREATE UNLOGGED TABLE job_tenant_hand_outs (
    xact    xid8 NOT NULL DEFAULT pg_current_xact_id(),
    queues  text[] NOT NULL,
    tenants text[] NOT NULL,
    freed   boolean NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

CREATE INDEX job_tenant_hand_outs_xact_idx ON job_tenant_hand_outs (xact);

-- The hand-out lock bucket of a queue's tenant, 0 to 127.
CREATE FUNCTION jobwire_tenant_hand_out_bucket(p_queue text, p_tenant text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtext(p_queue || E'\x1f' || p_tenant) & 127
$$;

-- Make sure the slot rows of (p_queue, p_tenant) exist up to p_cap, as
-- in migration 20261206000002, inserting only the slots that are missing.
CREATE OR REPLACE FUNCTION jobwire_ensure_tenant_slots(p_queue text, p_tenant text, p_cap integer)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Until this transaction ends, the sweep of idle tenants leaves this
    -- queue's slot rows alone (migration 20261206000002).
    PERFORM pg_advisory_xact_lock_shared(hashtext('jobwire.tenant_slots'), hashtext(p_queue));
    IF NOT EXISTS (SELECT 1 FROM job_tenant_slots x
                   WHERE x.queue = p_queue AND x.tenant = p_tenant AND x.slot = p_cap) THEN
        INSERT INTO job_tenant_slots (queue, tenant, slot)
        SELECT p_queue, p_tenant, s
        FROM generate_series(1, p_cap) s
        WHERE NOT EXISTS (SELECT 1 FROM job_tenant_slots x
                          WHERE x.queue = p_queue AND x.tenant = p_tenant AND x.slot = s)
        ON CONFLICT DO NOTHING;
    END IF;
END;
$$;

-- Note the tenants of `p_queues` for this transaction's hand-out at commit
-- (`p_freed`: slots of theirs were freed without a successor), and count
-- the note in the transaction-local setting jobwire.hand_outs_noted.
CREATE FUNCTION jobwire_note_hand_out(p_queues text[], p_tenants text[], p_freed boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Counted first: with SET CONSTRAINTS ALL IMMEDIATE the trigger fires
    -- at the end of the INSERT, and must find the count raised.
    PERFORM set_config('jobwire.hand_outs_noted',
                       (coalesce(nullif(current_setting('jobwire.hand_outs_noted', true), ''), '0')::bigint
                        + 1)::text,
                       true);
    INSERT INTO job_tenant_hand_outs (queues, tenants, freed) VALUES (p_queues, p_tenants, p_freed);
END;
$$;

-- Hand the free slots of every capped tenant of `p_queues` (broker queues;
-- others are ignored) to its due jobs holding none, each with its wake-up
-- (reason `p_reason`), in claim order. Holds the tenants' hand-out locks
-- shared until the transaction ends. A job is locked first and a slot
-- after, so no free slot stays locked without a job.
CREATE OR REPLACE FUNCTION jobwire_hand_out_free_slots(p_queues text[], p_tenants text[], p_reason text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    bucket   integer;
    g        record;
    next_job record;
    free     integer;
    due      timestamptz;
    handed   integer := 0;
BEGIN
    FOR bucket IN
        SELECT DISTINCT jobwire_tenant_hand_out_bucket(u.queue, u.tenant) AS b
        FROM unnest(p_queues, p_tenants) AS u(queue, tenant)
        ORDER BY b
    LOOP
        PERFORM pg_advisory_xact_lock_shared(hashtext('jobwire.tenant_hand_out'), bucket);
    END LOOP;
    due := clock_timestamp();
    FOR g IN
        SELECT t.queue, t.tenant, q.topic, jobwire_tenant_cap(t.queue, t.tenant) AS cap
        FROM (SELECT DISTINCT u.queue, u.tenant FROM unnest(p_queues, p_tenants) AS u(queue, tenant)) t
        JOIN job_queues q ON q.queue = t.queue AND q.dispatch = 'broker'
        ORDER BY t.queue, t.tenant
    LOOP
        CONTINUE WHEN g.cap IS NULL;
        LOOP
            -- Is a slot free? Read without a lock: a tenant at its cap (a
            -- backlog's everyday case) has nothing to lock. A slot a
            -- transaction has freed but not committed is not seen here;
            -- that transaction hands it out at its commit, under the lock
            -- this one holds shared, and sees this transaction's jobs.
            PERFORM 1 FROM job_tenant_slots s
            WHERE s.queue = g.queue AND s.tenant = g.tenant AND s.job_id IS NULL AND s.slot <= g.cap
            LIMIT 1;
            EXIT WHEN NOT FOUND;
            SELECT j.job_id, j.lease_generation, j.job_type, j.traceparent, j.tracestate
            INTO next_job
            FROM jobs j
            WHERE j.queue = g.queue AND j.tenant = g.tenant
              AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
              AND j.tenant_slot IS NULL
            ORDER BY j.priority, j.run_after, j.job_id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            SELECT s.slot INTO free
            FROM job_tenant_slots s
            WHERE s.queue = g.queue AND s.tenant = g.tenant AND s.job_id IS NULL AND s.slot <= g.cap
            ORDER BY s.slot
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            -- updated_at: when the slot was handed over, which the safety
            -- net's claim reads (migration 20261203000006).
            UPDATE jobs SET tenant_slot = free, updated_at = now() WHERE job_id = next_job.job_id;
            UPDATE job_tenant_slots SET job_id = next_job.job_id
            WHERE queue = g.queue AND tenant = g.tenant AND slot = free;
            INSERT INTO job_outbox (topic, message_key, payload, headers)
            SELECT g.topic, next_job.job_id::text, w.payload, w.headers
            FROM jobwire_wake_up(next_job.job_id, next_job.lease_generation, g.queue,
                                 next_job.job_type, p_reason, next_job.traceparent,
                                 next_job.tracestate) w;
            handed := handed + 1;
        END LOOP;
    END LOOP;
    RETURN handed;
END;
$$;

-- At commit: hand out the free slots of the tenants this transaction
-- enqueued for or freed slots of. The first firing does every row of the
-- transaction and deletes them; the rest return at once.
CREATE FUNCTION jobwire_hand_out_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted     text;
    lock      record;
    pair      record;
    arrived_q text[];
    arrived_t text[];
    freed_q   text[];
    freed_t   text[];
BEGIN
    -- Nothing noted since the last firing of this transaction.
    noted := coalesce(nullif(current_setting('jobwire.hand_outs_noted', true), ''), '0');
    IF noted = coalesce(nullif(current_setting('jobwire.hand_outs_done', true), ''), '0') THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('jobwire.hand_outs_done', noted, true);
    WITH gone AS (
        DELETE FROM job_tenant_hand_outs h
        WHERE h.xact = pg_current_xact_id()
        RETURNING h.queues, h.tenants, h.freed
    ),
    pairs AS (
        SELECT DISTINCT u.queue, u.tenant, gone.freed
        FROM gone, unnest(gone.queues, gone.tenants) AS u(queue, tenant)
    )
    SELECT array_agg(p.queue) FILTER (WHERE NOT p.freed), array_agg(p.tenant) FILTER (WHERE NOT p.freed),
           array_agg(p.queue) FILTER (WHERE p.freed), array_agg(p.tenant) FILTER (WHERE p.freed)
    INTO arrived_q, arrived_t, freed_q, freed_t
    FROM pairs p;
    IF arrived_q IS NULL AND freed_q IS NULL THEN
        RETURN NULL;
    END IF;
    -- The arrived tenants' slot rows first, before any bucket is held, in
    -- one order.
    FOR pair IN
        SELECT a.queue, a.tenant, jobwire_tenant_cap(a.queue, a.tenant) AS cap
        FROM unnest(arrived_q, arrived_t) AS a(queue, tenant)
        ORDER BY a.queue, a.tenant
    LOOP
        CONTINUE WHEN pair.cap IS NULL;
        PERFORM jobwire_ensure_tenant_slots(pair.queue, pair.tenant, pair.cap);
    END LOOP;
    -- Every bucket at once, in order: exclusive where a slot was freed.
    FOR lock IN
        SELECT b.bucket, bool_or(b.freed) AS exclusive
        FROM (SELECT jobwire_tenant_hand_out_bucket(a.queue, a.tenant) AS bucket, false AS freed
              FROM unnest(arrived_q, arrived_t) AS a(queue, tenant)
              UNION ALL
              SELECT jobwire_tenant_hand_out_bucket(f.queue, f.tenant), true
              FROM unnest(freed_q, freed_t) AS f(queue, tenant)) b
        GROUP BY b.bucket
        ORDER BY b.bucket
    LOOP
        IF lock.exclusive THEN
            PERFORM pg_advisory_xact_lock(hashtext('jobwire.tenant_hand_out'), lock.bucket);
        ELSE
            PERFORM pg_advisory_xact_lock_shared(hashtext('jobwire.tenant_hand_out'), lock.bucket);
        END IF;
    END LOOP;
    -- New statements from here: they see every commit of a transaction
    -- that held one of these locks.
    IF arrived_q IS NOT NULL THEN
        PERFORM jobwire_hand_out_free_slots(arrived_q, arrived_t, NULL);
    END IF;
    IF freed_q IS NOT NULL THEN
        PERFORM jobwire_hand_out_free_slots(freed_q, freed_t, 'slot');
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER job_tenant_hand_outs_at_commit
    AFTER INSERT ON job_tenant_hand_outs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    EXECUTE FUNCTION jobwire_hand_out_at_commit();

-- Give a job's slot back, as in migration 20261203000001; a broker
-- queue's slot freed without a successor is noted for the hand-out at
-- commit. (Every way out of RUNNING but the completion comes here: a sweep,
-- a cancel, a hand edit, a deleted row. The completion notes its own, in
-- finish_many.sql.)
CREATE OR REPLACE FUNCTION jobwire_give_back_tenant_slot(p_queue text, p_tenant text, p_slot integer,
                                                         p_job_id uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    wake_topic text;
BEGIN
    SELECT q.topic INTO wake_topic
    FROM job_queues q WHERE q.queue = p_queue AND q.dispatch = 'broker';
    IF wake_topic IS NOT NULL
       AND p_slot <= coalesce(jobwire_tenant_cap(p_queue, p_tenant), 0)
       AND jobwire_hand_over_slot(p_queue, p_tenant, p_slot, wake_topic, 'slot') THEN
        RETURN;
    END IF;
    UPDATE job_tenant_slots SET job_id = NULL
    WHERE queue = p_queue AND tenant = p_tenant AND slot = p_slot AND job_id = p_job_id;
    IF wake_topic IS NOT NULL THEN
        PERFORM jobwire_note_hand_out(ARRAY[p_queue], ARRAY[p_tenant], true);
    ELSIF jobwire_wake_token('jobwire_jobs', p_queue) THEN
        PERFORM pg_notify('jobwire_jobs', p_queue);
    END IF;
END;
$$;

-- The enqueue's statement trigger notes its capped tenants for the
-- commit; the rest is as migration 20261203000002 made it.
CREATE OR REPLACE FUNCTION jobwire_wake_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    capped_queues  text[];
    capped_tenants text[];
    limit_queues   text[];
    limit_tenants  text[];
    limit_counts   integer[];
    limit_urgency  smallint[];
    limit_totals   integer[];
BEGIN
    -- Nothing below applies to a job on a PostgreSQL-path queue without
    -- enqueue limits (or on a queue never configured).
    IF NOT EXISTS (SELECT 1 FROM new_jobs n JOIN job_queues q ON q.queue = n.queue
                   WHERE q.dispatch = 'broker' OR q.enqueue_limited) THEN
        RETURN NULL;
    END IF;
    -- While no queue has a limit, this probe of an empty partial index is
    -- all the limits add to a broker queue's enqueue. A scheduler's
    -- occurrences are not limited (it says so for its transaction): they
    -- come at their cron's pace, and refusing one would stall every
    -- schedule fired in the same transaction.
    IF EXISTS (SELECT 1 FROM job_queues WHERE enqueue_limited)
       AND current_setting('jobwire.firing_schedules', true) IS DISTINCT FROM 'on' THEN
        SELECT array_agg(g.queue), array_agg(g.tenant), array_agg(g.jobs), array_agg(g.least_urgent),
               array_agg(g.queue_jobs)
        INTO limit_queues, limit_tenants, limit_counts, limit_urgency, limit_totals
        FROM (SELECT n.queue, n.tenant, count(*)::integer AS jobs, max(n.priority) AS least_urgent,
                     (sum(count(*)) OVER (PARTITION BY n.queue))::integer AS queue_jobs
              FROM new_jobs n
              WHERE n.state IN ('QUEUED', 'RETRY_WAIT')
                AND EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = n.queue AND q.enqueue_limited)
              GROUP BY n.queue, n.tenant) g;
        IF limit_queues IS NOT NULL THEN
            PERFORM jobwire_check_enqueue_limits(limit_queues, limit_tenants, limit_counts, limit_urgency,
                                                 limit_totals);
        END IF;
    END IF;

    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT q.topic, n.job_id::text, w.payload, w.headers, n.run_after
    FROM new_jobs n
    JOIN job_queues q ON q.queue = n.queue AND q.dispatch = 'broker'
    CROSS JOIN LATERAL jobwire_wake_up(n.job_id, n.lease_generation, n.queue, n.job_type,
                                       NULL, n.traceparent, n.tracestate) w
    WHERE n.state IN ('QUEUED', 'RETRY_WAIT')
      AND NOT (q.tenant_capped AND n.tenant IS NOT NULL AND n.run_after <= now()
               AND jobwire_tenant_cap(n.queue, n.tenant) IS NOT NULL);

    SELECT array_agg(g.queue), array_agg(g.tenant) INTO capped_queues, capped_tenants
    FROM (SELECT DISTINCT n.queue, n.tenant
          FROM new_jobs n
          JOIN job_queues q ON q.queue = n.queue AND q.dispatch = 'broker' AND q.tenant_capped
          WHERE n.tenant IS NOT NULL AND n.state IN ('QUEUED', 'RETRY_WAIT')
            AND n.run_after <= now()) g
    WHERE jobwire_tenant_cap(g.queue, g.tenant) IS NOT NULL;
    -- Their free slots are handed out as the transaction commits
    -- (jobwire_hand_out_at_commit, above), not here.
    IF capped_queues IS NOT NULL THEN
        PERFORM jobwire_note_hand_out(capped_queues, capped_tenants, false);
    END IF;
    RETURN NULL;
END;
$$;
