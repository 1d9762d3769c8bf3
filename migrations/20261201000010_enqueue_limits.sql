-- jobwire schema: enqueue limits, and shedding low-priority work.
--
-- A queue may refuse an enqueue instead of burying its urgent work under a
-- producer's runaway backlog:
--
-- * a cap on the jobs waiting on the queue (`job_queues.max_queued`);
-- * shedding: while the queue holds `shed_depth` or more waiting jobs
--   (before the enqueue), a job less urgent than `shed_priority` (a larger
--   priority number) is refused, so urgent work still gets in;
-- * per tenant, a cap on its waiting jobs and an enqueue rate (`jobs` per
--   `seconds`): a default for every tenant on `job_queues`, overrides in
--   `job_tenants`.
--
-- Off unless configured: while no queue has a limit, the enqueue trigger
-- probes one empty partial index (`job_queues.enqueue_limited`) and does
-- nothing more; once one has, it looks up the queues it inserted into.
--
-- Over a limit the inserting statement fails, so nothing is written, with
-- its own SQLSTATE and a JSON DETAIL the libraries parse:
--   JW429  queue full  (reason "queue", "tenant" or "shed"), retry after 1 s
--   JW42R  rate limited (tenant), retry after the rate allows the batch
-- The check runs after the rows are in, so a dedup duplicate (which inserts
-- nothing) is never refused, and every way into `jobs` is limited alike:
-- the Rust enqueue, `jobwire_enqueue`, the HTTP API, a plain INSERT. Only
-- a scheduler's occurrences are not (see the trigger).
--
-- Depth is counted, not kept: up to the limit, over the waiting rows of the
-- queue (or of the tenant) in the claimable indexes. Concurrent enqueues do
-- not see each other's uncommitted rows, so the cap can be passed by what
-- transactions committing at the same moment add: it holds producers back,
-- it is not a fence.
--
-- The rate is a sliding-window counter kept per (queue, tenant) and per
-- database session (`job_enqueue_counts`, keyed by the backend's pid): a
-- session only ever updates its own row, so producers never wait for one
-- another, and the row lock held until the caller's commit is one no other
-- session wants. The counter rolls back with the caller's transaction: an
-- enqueue that was not committed did not count. The check sums every
-- session's rows for the current and the previous window.

ALTER TABLE job_queues
    ADD COLUMN max_queued          integer CHECK (max_queued > 0),
    ADD COLUMN shed_depth          integer CHECK (shed_depth > 0),
    ADD COLUMN shed_priority       smallint,
    ADD COLUMN tenant_max_queued   integer CHECK (tenant_max_queued > 0),
    ADD COLUMN tenant_rate_jobs    integer CHECK (tenant_rate_jobs > 0),
    ADD COLUMN tenant_rate_seconds integer CHECK (tenant_rate_seconds BETWEEN 1 AND 86400),
    -- Whether any limit above or any tenant override applies: the enqueue
    -- trigger's one read when nothing is configured.
    ADD COLUMN enqueue_limited     boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT job_queues_shed_pair CHECK ((shed_depth IS NULL) = (shed_priority IS NULL)),
    ADD CONSTRAINT job_queues_rate_pair CHECK ((tenant_rate_jobs IS NULL) = (tenant_rate_seconds IS NULL));

ALTER TABLE job_tenants
    ADD COLUMN max_queued   integer CHECK (max_queued > 0),
    ADD COLUMN rate_jobs    integer CHECK (rate_jobs > 0),
    ADD COLUMN rate_seconds integer CHECK (rate_seconds BETWEEN 1 AND 86400),
    ADD CONSTRAINT job_tenants_rate_pair CHECK ((rate_jobs IS NULL) = (rate_seconds IS NULL));

-- The queues with a limit: the enqueue trigger's first (and, while there
-- are none, only) question.
CREATE INDEX job_queues_enqueue_limited_idx ON job_queues (queue) WHERE enqueue_limited;

-- Enqueues counted for the rate: one row per (queue, tenant, session),
-- holding the session's count in the window starting at `window_start` and
-- in the window before it. Rows of sessions long gone hold old windows and
-- count for nothing; the retention pass deletes them.
CREATE TABLE job_enqueue_counts (
    queue         text NOT NULL,
    tenant        text NOT NULL,
    backend       integer NOT NULL,
    window_start  timestamptz NOT NULL,
    count         integer NOT NULL,
    previous      integer NOT NULL,
    PRIMARY KEY (queue, tenant, backend)
);

-- Keep job_queues.enqueue_limited true exactly while some limit applies.
CREATE FUNCTION jobwire_refresh_enqueue_limited(p_queue text) RETURNS void
LANGUAGE sql AS $$
    UPDATE job_queues q
    SET enqueue_limited = (q.max_queued IS NOT NULL OR q.shed_depth IS NOT NULL
                           OR q.tenant_max_queued IS NOT NULL OR q.tenant_rate_jobs IS NOT NULL
                           OR EXISTS (SELECT 1 FROM job_tenants t
                                      WHERE t.queue = p_queue
                                        AND (t.max_queued IS NOT NULL OR t.rate_jobs IS NOT NULL))),
        updated_at = now()
    WHERE q.queue = p_queue
$$;

-- Refuse an enqueue over a limit: SQLSTATE JW429 (full) or JW42R (rate),
-- a message for a person, a DETAIL for a program.
CREATE FUNCTION jobwire_refuse_enqueue(p_code text, p_reason text, p_queue text, p_tenant text,
                                       p_limit integer, p_seconds integer, p_retry_after_ms bigint,
                                       p_message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', p_message
        USING ERRCODE = p_code,
              DETAIL = json_build_object('reason', p_reason, 'queue', p_queue, 'tenant', p_tenant,
                                         'limit', p_limit, 'seconds', p_seconds,
                                         'retryAfterMs', greatest(p_retry_after_ms, 1))::text,
              HINT = 'retry after ' || round(greatest(p_retry_after_ms, 1) / 1000.0, 3) || ' s';
END;
$$;

-- How many waiting jobs `p_queue` (or, with a tenant, that tenant of it)
-- holds, counted only up to `p_upto`: the cost is the limit's, not the
-- backlog's.
CREATE FUNCTION jobwire_waiting_upto(p_queue text, p_tenant text, p_upto bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_tenant IS NULL THEN
        (SELECT count(*) FROM (
             SELECT 1 FROM jobs j
             WHERE j.queue = p_queue AND j.state IN ('QUEUED', 'RETRY_WAIT')
             LIMIT p_upto) w)
    ELSE
        (SELECT count(*) FROM (
             SELECT 1 FROM jobs j
             WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.state IN ('QUEUED', 'RETRY_WAIT')
             LIMIT p_upto) w)
    END
$$;

-- Count `p_jobs` enqueues of one tenant against its rate, or refuse them.
-- Sliding window: the previous window's count weighs as much as the part
-- of it still inside the last `p_seconds`.
CREATE FUNCTION jobwire_take_enqueue_rate(p_queue text, p_tenant text, p_jobs integer,
                                          p_limit integer, p_seconds integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    at_epoch   double precision := extract(epoch FROM clock_timestamp());
    window_len double precision := p_seconds;
    cur_start  timestamptz := to_timestamp(floor(at_epoch / window_len) * window_len);
    prev_start timestamptz := cur_start - make_interval(secs => window_len);
    into_cur   double precision;  -- fraction of the current window gone by
    cur        bigint;
    prev       bigint;
    room       double precision;
    wait_s     double precision;
BEGIN
    into_cur := (at_epoch - extract(epoch FROM cur_start)) / window_len;
    SELECT coalesce(sum(CASE WHEN c.window_start = cur_start THEN c.count ELSE 0 END), 0),
           coalesce(sum(CASE WHEN c.window_start = cur_start THEN c.previous
                             WHEN c.window_start = prev_start THEN c.count ELSE 0 END), 0)
    INTO cur, prev
    FROM job_enqueue_counts c
    WHERE c.queue = p_queue AND c.tenant = p_tenant AND c.window_start >= prev_start;

    IF prev * (1 - into_cur) + cur + p_jobs > p_limit THEN
        IF p_jobs > p_limit THEN
            wait_s := window_len;
        ELSE
            room := p_limit - p_jobs - cur;
            IF room >= 0 THEN
                -- Later in this window, once enough of the previous one slid out.
                wait_s := ((1 - room / prev) - into_cur) * window_len;
            ELSE
                -- In the next window, once enough of this one slid out.
                wait_s := (1 - into_cur) * window_len
                          + (1 - (p_limit - p_jobs)::double precision / cur) * window_len;
            END IF;
        END IF;
        PERFORM jobwire_refuse_enqueue(
            'JW42R', 'rate', p_queue, p_tenant, p_limit, p_seconds, ceil(wait_s * 1000)::bigint,
            format('tenant %s of queue %s is over its enqueue rate of %s job(s) per %s s%s',
                   to_json(p_tenant), to_json(p_queue), p_limit, p_seconds,
                   CASE WHEN p_jobs > p_limit
                        THEN format(' (this enqueue alone has %s)', p_jobs) ELSE '' END));
    END IF;

    INSERT INTO job_enqueue_counts AS c (queue, tenant, backend, window_start, count, previous)
    VALUES (p_queue, p_tenant, pg_backend_pid(), cur_start, p_jobs, 0)
    ON CONFLICT (queue, tenant, backend) DO UPDATE
    SET previous = CASE WHEN c.window_start = cur_start THEN c.previous
                        WHEN c.window_start = prev_start THEN c.count
                        ELSE 0 END,
        count = CASE WHEN c.window_start = cur_start THEN c.count + p_jobs ELSE p_jobs END,
        window_start = cur_start;
END;
$$;

-- The limits, for the rows one statement inserted into limited queues:
-- `p_queues`/`p_tenants` name each (queue, tenant) group, `p_counts` its
-- rows, `p_least_urgent` its largest priority number and `p_queue_counts`
-- the statement's rows on that queue in all. Shedding first,
-- then the queue's depth, the tenant's depth, and last the rate (so a
-- refused enqueue takes nothing from it; the refusal rolls everything back
-- anyway).
CREATE FUNCTION jobwire_check_enqueue_limits(p_queues text[], p_tenants text[], p_counts integer[],
                                             p_least_urgent smallint[], p_queue_counts integer[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    g          record;
    q          job_queues%ROWTYPE;
    t          job_tenants%ROWTYPE;
    cap        integer;
    rate_jobs  integer;
    rate_secs  integer;
BEGIN
    FOR g IN SELECT * FROM unnest(p_queues, p_tenants, p_counts, p_least_urgent, p_queue_counts)
                 AS x(queue, tenant, jobs, least_urgent, queue_jobs)
    LOOP
        SELECT * INTO q FROM job_queues WHERE queue = g.queue;
        IF NOT FOUND OR NOT q.enqueue_limited THEN
            CONTINUE;
        END IF;
        -- Shedding looks at the jobs that were waiting before this statement.
        IF q.shed_depth IS NOT NULL AND g.least_urgent > q.shed_priority
           AND jobwire_waiting_upto(g.queue, NULL, q.shed_depth::bigint + g.queue_jobs) - g.queue_jobs
               >= q.shed_depth THEN
            PERFORM jobwire_refuse_enqueue(
                'JW429', 'shed', g.queue, g.tenant, q.shed_depth, NULL, 1000,
                format('queue %s holds %s or more waiting jobs: it takes only jobs of priority %s or more urgent (lower) now',
                       to_json(g.queue), q.shed_depth, q.shed_priority));
        END IF;
        IF q.max_queued IS NOT NULL
           AND jobwire_waiting_upto(g.queue, NULL, q.max_queued::bigint + 1) > q.max_queued THEN
            PERFORM jobwire_refuse_enqueue(
                'JW429', 'queue', g.queue, g.tenant, q.max_queued, NULL, 1000,
                format('queue %s is full: at most %s waiting job(s)', to_json(g.queue), q.max_queued));
        END IF;
        IF g.tenant IS NULL THEN
            CONTINUE;
        END IF;
        t := NULL;
        SELECT * INTO t FROM job_tenants WHERE queue = g.queue AND tenant = g.tenant;
        cap := coalesce(t.max_queued, q.tenant_max_queued);
        IF cap IS NOT NULL AND jobwire_waiting_upto(g.queue, g.tenant, cap::bigint + 1) > cap THEN
            PERFORM jobwire_refuse_enqueue(
                'JW429', 'tenant', g.queue, g.tenant, cap, NULL, 1000,
                format('tenant %s of queue %s is full: at most %s waiting job(s)',
                       to_json(g.tenant), to_json(g.queue), cap));
        END IF;
        rate_jobs := coalesce(t.rate_jobs, q.tenant_rate_jobs);
        rate_secs := coalesce(t.rate_seconds, q.tenant_rate_seconds);
        IF rate_jobs IS NOT NULL THEN
            PERFORM jobwire_take_enqueue_rate(g.queue, g.tenant, g.jobs, rate_jobs, rate_secs);
        END IF;
    END LOOP;
END;
$$;

-- The enqueue trigger: the limits first (only for queues that have one),
-- then the wake-ups exactly as before.
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
    -- While no queue has a limit (the usual case) this probe of an empty
    -- partial index is all the trigger adds to an enqueue. A scheduler's
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
    IF capped_queues IS NOT NULL THEN
        PERFORM jobwire_ensure_tenant_slots(g.queue, g.tenant, jobwire_tenant_cap(g.queue, g.tenant))
        FROM unnest(capped_queues, capped_tenants) AS g(queue, tenant);
        PERFORM jobwire_hand_out_free_slots(capped_queues, capped_tenants, NULL);
    END IF;
    RETURN NULL;
END;
$$;

-- A token may be bound to a tenant: it enqueues only that tenant's jobs
-- (the HTTP API fills the tenant in, and refuses another) and reads only
-- them; every other call refuses it. NULL: not bound. Never an admin token.
ALTER TABLE job_api_tokens
    ADD COLUMN tenant text
        CHECK (tenant IS NULL OR (tenant ~ '[^[:space:]]' AND octet_length(tenant) <= 255)),
    ADD CONSTRAINT job_api_tokens_tenant_not_admin CHECK (tenant IS NULL OR scope <> 'admin');
