-- jobwire schema: shedding counts the enqueue's own jobs; a queue's limits
-- are checked once per statement.
--
-- Shedding compared only the jobs waiting before the statement with the
-- shedding depth. One statement of many less urgent jobs (an
-- `enqueue_many`, a service's multi-row INSERT, or the HTTP API's
-- statement for concurrent requests) passed the depth by all it held,
-- and could fill the queue up to its cap: the room the depth keeps for
-- urgent work was gone, and the next urgent job was refused as "full".
-- Now a statement that holds a job below the shedding priority is refused
-- when the queue, with the statement's jobs, would hold more than the
-- depth. For one job that is the rule as before (refused once the depth
-- is reached); its message says "would hold more than" the depth.
--
-- The queue's own checks (shedding, the queue's cap) ran once per
-- (queue, tenant) group of the statement, each a count of the queue's
-- waiting jobs up to the limit: a statement of 100 tenants' jobs counted
-- the queue 100 times (0.5 s with 20,000 waiting). They now run once per
-- queue, then the tenants' checks once per tenant, in the same order of
-- importance as before: shedding, the queue's cap, the tenant's cap, the
-- rate. `p_queue_counts` is no longer read; the enqueue trigger still
-- passes it, so the function keeps its arguments.
CREATE OR REPLACE FUNCTION jobwire_check_enqueue_limits(p_queues text[], p_tenants text[],
                                                        p_counts integer[],
                                                        p_least_urgent smallint[],
                                                        p_queue_counts integer[])
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
    -- Each queue once: its least urgent job, and one of its tenants for
    -- the refusal's detail (the statement's only one, for a single job).
    FOR g IN SELECT x.queue, max(x.least_urgent) AS least_urgent,
                    (array_agg(x.tenant ORDER BY x.tenant))[1] AS tenant
             FROM unnest(p_queues, p_tenants, p_least_urgent) AS x(queue, tenant, least_urgent)
             GROUP BY x.queue
    LOOP
        SELECT * INTO q FROM job_queues WHERE queue = g.queue;
        IF NOT FOUND OR NOT q.enqueue_limited THEN
            CONTINUE;
        END IF;
        -- The count takes in the statement's own jobs (this transaction
        -- sees them), so it says what the queue would hold.
        IF q.shed_depth IS NOT NULL AND g.least_urgent > q.shed_priority
           AND jobwire_waiting_upto(g.queue, NULL, q.shed_depth::bigint + 1) > q.shed_depth THEN
            PERFORM jobwire_refuse_enqueue(
                'JW429', 'shed', g.queue, g.tenant, q.shed_depth, NULL, 1000,
                format('queue %s would hold more than %s waiting jobs: it takes only jobs of priority %s or more urgent (lower) now',
                       to_json(g.queue), q.shed_depth, q.shed_priority));
        END IF;
        IF q.max_queued IS NOT NULL
           AND jobwire_waiting_upto(g.queue, NULL, q.max_queued::bigint + 1) > q.max_queued THEN
            PERFORM jobwire_refuse_enqueue(
                'JW429', 'queue', g.queue, g.tenant, q.max_queued, NULL, 1000,
                format('queue %s is full: at most %s waiting job(s)', to_json(g.queue), q.max_queued));
        END IF;
    END LOOP;
    FOR g IN SELECT * FROM unnest(p_queues, p_tenants, p_counts) AS x(queue, tenant, jobs)
             WHERE x.tenant IS NOT NULL
    LOOP
        SELECT * INTO q FROM job_queues WHERE queue = g.queue;
        IF NOT FOUND OR NOT q.enqueue_limited THEN
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
