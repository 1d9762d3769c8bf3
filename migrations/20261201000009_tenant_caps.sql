-- jobwire schema: tenants, and per-tenant caps on running jobs.
--
-- A job may name its tenant (the customer, account or workspace it works
-- for). A queue may cap how many of one tenant's jobs run at once: a
-- default for every tenant (`job_queues.tenant_max_running`) and overrides
-- per tenant (`job_tenants`). Off unless configured: a queue with no cap
-- claims exactly as before, and a job without a tenant is never capped.
--
-- The cap is held by slot rows, not by counting: a tenant under a cap of N
-- has N rows in `job_tenant_slots`, and a job runs only while it holds one.
-- A claim takes free slots `FOR UPDATE SKIP LOCKED`, and the claim and the
-- slot assignment commit together. Under READ COMMITTED, two claimers can
-- never take one slot: the second skips the locked row, or, once the first
-- committed, sees it taken (a re-checked `job_id IS NULL`). A count read in
-- the claim statement would let both through.
--
-- The holder's row records its slot too (`jobs.tenant_slot`), so every
-- statement that must not hand out a slot twice re-checks a column of the
-- row it locks, which READ COMMITTED re-reads after waiting for the lock.
--
-- A slot is freed by a trigger on every way a job stops needing it
-- (success, failure, retry wait, cancellation, a swept lease), in the
-- transaction that frees it. On a broker queue the trigger hands the slot
-- straight to the tenant's next waiting job and writes that job's wake-up,
-- so the next job's wake-up is the slot itself (`reserved`): a capped
-- tenant's 100,000 waiting jobs hold N wake-ups, not 100,000, and never
-- queue ahead of other tenants' in the outbox. On a PostgreSQL-path queue
-- the slot is freed and the queue notified (with the wake token).

ALTER TABLE jobs
    ADD COLUMN tenant text,
    -- The slot this job holds under its tenant's cap (running, or waiting
    -- with its wake-up on the way on a broker queue); NULL: none.
    ADD COLUMN tenant_slot integer,
    ADD CONSTRAINT jobs_tenant_size
        CHECK (tenant IS NULL OR (tenant ~ '[^[:space:]]' AND octet_length(tenant) <= 255)) NOT VALID;
ALTER TABLE jobs_history ADD COLUMN tenant text, ADD COLUMN tenant_slot integer;

-- Waiting jobs by tenant (jobs without a tenant form one group): a capped
-- claim walks it to find each tenant with due work, one index probe per
-- tenant however deep a tenant's backlog. It holds waiting rows only, as
-- jobs_claimable_idx does; a claim or a completion adds no entry to it.
CREATE INDEX jobs_tenant_claimable_idx ON jobs (queue, tenant, priority, run_after, job_id)
    WHERE state IN ('QUEUED', 'RETRY_WAIT');

ALTER TABLE job_queues
    ADD COLUMN tenant_max_running integer CHECK (tenant_max_running > 0),
    -- Whether any tenant of this queue is capped (the default above or an
    -- override): the plain claim refuses capped queues, so that a claimer
    -- that does not know yet takes nothing rather than too much.
    ADD COLUMN tenant_capped boolean NOT NULL DEFAULT false;

CREATE TABLE job_tenants (
    queue        text NOT NULL CHECK (queue <> ''),
    tenant       text NOT NULL CHECK (tenant ~ '[^[:space:]]' AND octet_length(tenant) <= 255),
    max_running  integer CHECK (max_running > 0),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant)
);

CREATE TABLE job_tenant_slots (
    queue   text NOT NULL,
    tenant  text NOT NULL,
    slot    integer NOT NULL CHECK (slot > 0),
    -- The job holding it: running, or (broker queues) waiting with its
    -- wake-up on the way. NULL: free.
    job_id  uuid,
    PRIMARY KEY (queue, tenant, slot)
);
CREATE UNIQUE INDEX job_tenant_slots_job_idx ON job_tenant_slots (job_id)
    WHERE job_id IS NOT NULL;

-- A tenant's cap on a queue: its override, else the queue's default, else
-- NULL (not capped).
CREATE FUNCTION jobwire_tenant_cap(p_queue text, p_tenant text) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT t.max_running FROM job_tenants t WHERE t.queue = p_queue AND t.tenant = p_tenant),
        (SELECT q.tenant_max_running FROM job_queues q WHERE q.queue = p_queue))
$$;

-- Slot rows for `p_tenant` up to its cap (more are never deleted while
-- held; a claim uses only slots numbered up to the current cap). Slots
-- 1..cap are always made together, so when slot `cap` exists this is one
-- index probe and writes nothing.
CREATE FUNCTION jobwire_ensure_tenant_slots(p_queue text, p_tenant text, p_cap integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO job_tenant_slots (queue, tenant, slot)
    SELECT p_queue, p_tenant, s FROM generate_series(1, p_cap) s
    WHERE NOT EXISTS (SELECT 1 FROM job_tenant_slots x
                      WHERE x.queue = p_queue AND x.tenant = p_tenant AND x.slot = p_cap)
    ON CONFLICT DO NOTHING
$$;

-- Keep job_queues.tenant_capped true exactly while some cap applies.
CREATE FUNCTION jobwire_refresh_tenant_capped(p_queue text) RETURNS void
LANGUAGE sql AS $$
    UPDATE job_queues q
    SET tenant_capped = (q.tenant_max_running IS NOT NULL
                         OR EXISTS (SELECT 1 FROM job_tenants t
                                    WHERE t.queue = p_queue AND t.max_running IS NOT NULL)),
        updated_at = now()
    WHERE q.queue = p_queue
$$;

-- The claim for a queue with tenant caps: up to p_limit due jobs, most
-- urgent first, tenants taking turns at equal priority (every tenant's first
-- job before any tenant's second), a capped tenant's jobs only into its
-- free slots, which the same statement takes. Lease, fencing and attempt
-- count as in claim_batch.sql; p_due_ms as there (the broker path's safety
-- net asks for jobs overdue by that much).
CREATE FUNCTION jobwire_claim_capped(p_queue text, p_limit integer, p_owner text,
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
    untenanted := EXISTS (SELECT 1 FROM jobs j
                          WHERE j.queue = p_queue AND j.state IN ('QUEUED', 'RETRY_WAIT')
                            AND j.tenant IS NULL AND j.run_after <= due);
    -- A tenant seen for the first time (or whose cap was raised) gets its
    -- slot rows; for the others this is one index probe.
    PERFORM jobwire_ensure_tenant_slots(p_queue, c.tenant, c.cap)
    FROM (SELECT t AS tenant, jobwire_tenant_cap(p_queue, t) AS cap FROM unnest(waiting) t) c
    WHERE c.cap IS NOT NULL;

    RETURN QUERY
    WITH caps AS (
        SELECT t AS tenant, jobwire_tenant_cap(p_queue, t) AS cap FROM unnest(waiting) t
    ),
    locked_free AS (
        SELECT s.tenant, s.slot
        FROM job_tenant_slots s
        JOIN caps c ON c.tenant = s.tenant
        WHERE s.queue = p_queue AND s.job_id IS NULL AND s.slot <= c.cap
        FOR UPDATE OF s SKIP LOCKED
    ),
    free AS (
        SELECT f.tenant, f.slot, row_number() OVER (PARTITION BY f.tenant ORDER BY f.slot) AS n
        FROM locked_free f
    ),
    capped_jobs AS (
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM (SELECT f.tenant, count(*) AS n FROM free f GROUP BY f.tenant) f
        CROSS JOIN LATERAL (
            SELECT j.job_id, j.tenant, j.priority, j.run_after
            FROM jobs j
            WHERE j.queue = p_queue AND j.tenant = f.tenant
              AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
              AND j.tenant_slot IS NULL
            ORDER BY j.priority, j.run_after, j.job_id
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
            WHERE j.queue = p_queue AND j.tenant = c.tenant
              AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
            ORDER BY j.priority, j.run_after, j.job_id
            LIMIT p_limit
            FOR UPDATE OF j SKIP LOCKED
        ) j
        WHERE c.cap IS NULL
    ),
    reserved_jobs AS (
        -- Broker queues only: waiting jobs whose slot was handed to them
        -- (their wake-up is on the way, or was lost: the safety net's case).
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM job_tenant_slots s
        JOIN jobs j ON j.job_id = s.job_id
        WHERE broker AND s.queue = p_queue AND j.tenant_slot IS NOT NULL
          AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
        FOR UPDATE OF j SKIP LOCKED
    ),
    untenanted_jobs AS (
        SELECT j.job_id, j.tenant, j.priority, j.run_after
        FROM jobs j
        WHERE untenanted AND j.queue = p_queue AND j.tenant IS NULL
          AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= due
        ORDER BY j.priority, j.run_after, j.job_id
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
    chosen AS (
        -- The k-th picked job of a tenant that needs a slot gets its k-th
        -- locked free slot (there are at least as many: capped_jobs took
        -- no more than that); a job handed a slot keeps it.
        SELECT p.job_id, p.tenant, f.slot
        FROM (SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.reserved
                                             ORDER BY p.turn) AS n
              FROM picked p) p
        LEFT JOIN free f ON NOT p.reserved AND f.tenant = p.tenant AND f.n = p.n
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


-- Hand slot p_slot of (p_queue, p_tenant), already locked by the caller,
-- to the tenant's next due job that holds none, and write its wake-up on
-- p_topic. Returns false (the slot untouched) when no job is waiting.
CREATE FUNCTION jobwire_hand_over_slot(p_queue text, p_tenant text, p_slot integer, p_topic text,
                                       p_reason text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    next_job record;
BEGIN
    SELECT j.job_id, j.lease_generation, j.job_type, j.traceparent, j.tracestate
    INTO next_job
    FROM jobs j
    WHERE j.queue = p_queue AND j.tenant = p_tenant
      AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
      AND j.tenant_slot IS NULL
    ORDER BY j.priority, j.run_after, j.job_id
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE jobs SET tenant_slot = p_slot WHERE job_id = next_job.job_id;
    UPDATE job_tenant_slots SET job_id = next_job.job_id
    WHERE queue = p_queue AND tenant = p_tenant AND slot = p_slot;
    INSERT INTO job_outbox (topic, message_key, payload, headers)
    SELECT p_topic, next_job.job_id::text, w.payload, w.headers
    FROM jobwire_wake_up(next_job.job_id, next_job.lease_generation, p_queue, next_job.job_type,
                         p_reason, next_job.traceparent, next_job.tracestate) w;
    RETURN true;
END;
$$;

-- Give the free slots of capped tenants on broker queues to their waiting
-- jobs, with wake-ups: for each (queue, tenant) in p_groups, every free
-- slot not locked by another transaction. Used by the enqueue trigger (new
-- jobs of a tenant under its cap) and by the reconciler (a slot whose
-- hand-over was rolled back, a job that became due while its tenant had
-- nothing running) and the resume of a queue. A paused queue's slots are
-- handed out too: those wake-ups are misses (`paused`), and resuming the
-- queue wakes every job holding a slot again.
CREATE FUNCTION jobwire_hand_out_free_slots(p_queues text[], p_tenants text[], p_reason text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    free   record;
    handed integer := 0;
BEGIN
    FOR free IN
        SELECT s.queue, s.tenant, s.slot, q.topic
        FROM unnest(p_queues, p_tenants) AS g(queue, tenant)
        JOIN job_queues q ON q.queue = g.queue AND q.dispatch = 'broker'
        JOIN job_tenant_slots s ON s.queue = g.queue AND s.tenant = g.tenant
        WHERE s.job_id IS NULL
          AND s.slot <= coalesce(jobwire_tenant_cap(g.queue, g.tenant), 0)
        ORDER BY s.queue, s.tenant, s.slot
        FOR UPDATE OF s SKIP LOCKED
    LOOP
        IF jobwire_hand_over_slot(free.queue, free.tenant, free.slot, free.topic, p_reason) THEN
            handed := handed + 1;
        END IF;
    END LOOP;
    RETURN handed;
END;
$$;

-- A job that stops holding its slot (finished, failed, cancelled, or
-- waiting for a retry) forgets it in the same row write...
CREATE FUNCTION jobwire_forget_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant_slot := NULL;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_forget_tenant_slot
    BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant_slot IS NOT NULL
          AND NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'RETRY_WAIT')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_forget_tenant_slot();

-- ...and, once the statement has written its rows, the slot is freed in
-- the same transaction: on a broker queue handed to the tenant's next due
-- job that holds none, with its wake-up (reason `slot`); otherwise freed,
-- and the PostgreSQL-path queue notified (with the wake token).
CREATE FUNCTION jobwire_free_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wake_topic text;
BEGIN
    SELECT q.topic INTO wake_topic
    FROM job_queues q WHERE q.queue = OLD.queue AND q.dispatch = 'broker';
    IF wake_topic IS NOT NULL
       AND OLD.tenant_slot <= coalesce(jobwire_tenant_cap(OLD.queue, OLD.tenant), 0)
       AND jobwire_hand_over_slot(OLD.queue, OLD.tenant, OLD.tenant_slot, wake_topic, 'slot') THEN
        RETURN NULL;
    END IF;
    UPDATE job_tenant_slots SET job_id = NULL
    WHERE queue = OLD.queue AND tenant = OLD.tenant AND slot = OLD.tenant_slot
      AND job_id = OLD.job_id;
    IF wake_topic IS NULL AND jobwire_wake_token('jobwire_jobs', OLD.queue) THEN
        PERFORM pg_notify('jobwire_jobs', OLD.queue);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_free_tenant_slot
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant_slot IS NOT NULL
          AND NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'RETRY_WAIT')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_free_tenant_slot();

-- A job row deleted while it holds a slot (by hand: retention only moves
-- finished jobs) gives it back the same way.
CREATE TRIGGER jobs_free_tenant_slot_on_delete
    AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant_slot IS NOT NULL)
    EXECUTE FUNCTION jobwire_free_tenant_slot();

-- Broker path: claim named jobs of capped tenants (the wake-up claim hands
-- these over after claim_by_ids.sql declined them). A job claims with the
-- slot it was handed, or a free slot of its tenant it takes now; with
-- neither it is left waiting, and its wake-up is a miss (`capped`).
CREATE FUNCTION jobwire_claim_ids_capped(p_ids uuid[], p_owner text, p_lease_ms bigint,
                                         p_queues text[])
RETURNS SETOF jobs
LANGUAGE plpgsql AS $$
DECLARE
    id     uuid;
    job    jobs%ROWTYPE;
    cap    integer;
    taken  integer;
BEGIN
    FOREACH id IN ARRAY p_ids LOOP
        SELECT j.* INTO job
        FROM jobs j
        WHERE j.job_id = id
          AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
          AND array_position(p_queues, j.queue) IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = j.queue AND q.paused)
        FOR UPDATE OF j SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        taken := job.tenant_slot;
        IF taken IS NULL AND job.tenant IS NOT NULL THEN
            cap := jobwire_tenant_cap(job.queue, job.tenant);
            IF cap IS NOT NULL THEN
                PERFORM jobwire_ensure_tenant_slots(job.queue, job.tenant, cap);
                UPDATE job_tenant_slots s
                SET job_id = job.job_id
                WHERE (s.queue, s.tenant, s.slot) = (
                    SELECT f.queue, f.tenant, f.slot FROM job_tenant_slots f
                    WHERE f.queue = job.queue AND f.tenant = job.tenant
                      AND f.job_id IS NULL AND f.slot <= cap
                    ORDER BY f.slot LIMIT 1
                    FOR UPDATE SKIP LOCKED)
                RETURNING s.slot INTO taken;
                CONTINUE WHEN taken IS NULL;
            END IF;
        END IF;
        RETURN QUERY
        UPDATE jobs j
        SET state = 'RUNNING',
            tenant_slot = taken,
            lease_owner = p_owner,
            lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
            lease_generation = j.lease_generation + 1,
            attempt_count = j.attempt_count + 1,
            heartbeat_at = now(),
            updated_at = now()
        WHERE j.job_id = job.job_id
        RETURNING j.*;
    END LOOP;
END;
$$;


-- The SQL enqueue takes a tenant.
DROP FUNCTION jobwire_enqueue(text, jsonb, text, integer, timestamptz, integer, text, uuid, text, text);
-- Enqueue one job. Call it with named arguments; every argument but
-- job_type has the Rust library's default:
--
--   SELECT * FROM jobwire_enqueue('send_email', payload => '{"userId": 42}',
--                                 dedup_key => 'welcome:42');
--
-- Returns the job's id and whether the dedup key was already held (then the
-- id is the existing job's and nothing was written). Invalid arguments raise
-- SQLSTATE JW400 with the argument's name in DETAIL; a payload over the
-- limit raises JW413. traceparent / tracestate are the W3C trace context of
-- the caller's span (the worker's attempt spans link to it); tenant is
-- the customer the job works for (tenant caps, docs/tenants.md). Later
-- arguments will be added with defaults, so calls with named arguments
-- keep working.
CREATE FUNCTION jobwire_enqueue(
    job_type      text,
    payload       jsonb DEFAULT '{}',
    queue         text DEFAULT 'default',
    priority      integer DEFAULT 0,
    run_after     timestamptz DEFAULT NULL,
    max_attempts  integer DEFAULT 25,
    dedup_key     text DEFAULT NULL,
    new_job_id    uuid DEFAULT NULL,
    traceparent   text DEFAULT NULL,
    tracestate    text DEFAULT NULL,
    tenant        text DEFAULT NULL,
    OUT job_id    uuid,
    OUT duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    max_bytes integer;
    size      integer;
    inserted  uuid;
BEGIN
    -- The same rules, in the same order, as Enqueuer::validate in Rust; a
    -- test runs one table of cases through both.
    IF jobwire_enqueue.job_type IS NULL OR jobwire_enqueue.job_type ~ '^[[:space:]]*$' THEN
        RAISE EXCEPTION 'invalid job: job_type: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF octet_length(jobwire_enqueue.job_type) > 255 THEN
        RAISE EXCEPTION 'invalid job: job_type: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF jobwire_enqueue.queue IS NULL OR jobwire_enqueue.queue ~ '^[[:space:]]*$' THEN
        RAISE EXCEPTION 'invalid job: queue: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF octet_length(jobwire_enqueue.queue) > 255 THEN
        RAISE EXCEPTION 'invalid job: queue: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF jobwire_enqueue.priority IS NULL OR jobwire_enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'invalid job: priority: must be between -32768 and 32767, got %', jobwire_enqueue.priority
            USING ERRCODE = 'JW400', DETAIL = 'priority';
    END IF;
    IF jobwire_enqueue.max_attempts IS NULL OR jobwire_enqueue.max_attempts < 1 THEN
        RAISE EXCEPTION 'invalid job: max_attempts: must be at least 1, got %', jobwire_enqueue.max_attempts
            USING ERRCODE = 'JW400', DETAIL = 'max_attempts';
    END IF;
    IF jobwire_enqueue.dedup_key IS NOT NULL
       AND (jobwire_enqueue.dedup_key = '' OR octet_length(jobwire_enqueue.dedup_key) > 1024) THEN
        RAISE EXCEPTION 'invalid job: dedup_key: must be 1 to 1024 bytes' USING ERRCODE = 'JW400', DETAIL = 'dedup_key';
    END IF;
    IF jobwire_enqueue.traceparent IS NOT NULL
       AND (jobwire_enqueue.traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            OR jobwire_enqueue.traceparent ~ '^ff-'
            OR jobwire_enqueue.traceparent ~ '^..-0{32}-'
            OR jobwire_enqueue.traceparent ~ '-0{16}-..$') THEN
        RAISE EXCEPTION 'invalid job: traceparent: not a W3C traceparent (version-traceid-spanid-flags in lowercase hex, ids not all zero)'
            USING ERRCODE = 'JW400', DETAIL = 'traceparent';
    END IF;
    IF jobwire_enqueue.tracestate IS NOT NULL
       AND (jobwire_enqueue.traceparent IS NULL OR octet_length(jobwire_enqueue.tracestate) > 512) THEN
        RAISE EXCEPTION 'invalid job: tracestate: at most 512 bytes, and only with a traceparent'
            USING ERRCODE = 'JW400', DETAIL = 'tracestate';
    END IF;
    IF jobwire_enqueue.tenant IS NOT NULL AND jobwire_enqueue.tenant ~ '^[[:space:]]*$' THEN
        RAISE EXCEPTION 'invalid job: tenant: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'tenant';
    END IF;
    IF octet_length(jobwire_enqueue.tenant) > 255 THEN
        RAISE EXCEPTION 'invalid job: tenant: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'tenant';
    END IF;
    IF jobwire_enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'invalid job: payload: must not be NULL (use ''{}'')' USING ERRCODE = 'JW400', DETAIL = 'payload';
    END IF;
    SELECT s.max_payload_bytes INTO max_bytes FROM job_settings s;
    size := octet_length(jobwire_enqueue.payload::text);
    IF size > coalesce(max_bytes, 1048576) THEN
        PERFORM jobwire_reject_payload(size, coalesce(max_bytes, 1048576));
    END IF;

    -- A concurrent enqueue of the same key either commits first (ON CONFLICT
    -- waits for it, then the SELECT, with a fresh snapshot, sees its row) or
    -- rolls back (then our INSERT goes ahead). Under REPEATABLE READ the
    -- committed row can stay invisible: after three rounds, give up with a
    -- serialization failure, which the caller retries.
    FOR attempt IN 1..3 LOOP
        INSERT INTO jobs AS j (job_id, queue, job_type, priority, payload, max_attempts, run_after,
                               dedup_key, traceparent, tracestate, tenant)
        VALUES (coalesce(jobwire_enqueue.new_job_id, jobwire_uuidv7()),
                jobwire_enqueue.queue, jobwire_enqueue.job_type, jobwire_enqueue.priority::smallint,
                jobwire_enqueue.payload, jobwire_enqueue.max_attempts,
                coalesce(jobwire_enqueue.run_after, now()), jobwire_enqueue.dedup_key,
                jobwire_enqueue.traceparent, jobwire_enqueue.tracestate, jobwire_enqueue.tenant)
        ON CONFLICT (job_type, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
        RETURNING j.job_id INTO inserted;
        IF inserted IS NOT NULL THEN
            job_id := inserted;
            duplicate := false;
            RETURN;
        END IF;
        SELECT j.job_id INTO inserted
        FROM jobs j
        WHERE j.job_type = jobwire_enqueue.job_type AND j.dedup_key = jobwire_enqueue.dedup_key;
        IF inserted IS NOT NULL THEN
            job_id := inserted;
            duplicate := true;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'could not resolve dedup key % for job type %: concurrent enqueues',
        jobwire_enqueue.dedup_key, jobwire_enqueue.job_type
        USING ERRCODE = 'serialization_failure';
END;
$$;

-- The enqueue trigger: as before, except that a due job of a capped tenant
-- on a broker queue gets its wake-up with a slot. The tenant's free slots
-- are handed out now (to its longest-waiting jobs, these or earlier ones);
-- the others wait for a slot to free up, which hands itself on. So a
-- tenant's backlog holds as many wake-ups as it may run jobs.
CREATE OR REPLACE FUNCTION jobwire_wake_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    capped_queues  text[];
    capped_tenants text[];
BEGIN
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
    IF capped_queues IS NOT NULL THEN
        PERFORM jobwire_ensure_tenant_slots(g.queue, g.tenant, jobwire_tenant_cap(g.queue, g.tenant))
        FROM unnest(capped_queues, capped_tenants) AS g(queue, tenant);
        PERFORM jobwire_hand_out_free_slots(capped_queues, capped_tenants, NULL);
    END IF;
    RETURN NULL;
END;
$$;
