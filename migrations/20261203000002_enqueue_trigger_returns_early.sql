-- jobwire schema: the enqueue trigger returns at once for jobs with
-- nothing to do.
--
-- The statement trigger on jobs inserts (jobwire_wake_inserted) ran three
-- queries over the inserted rows on every enqueue: the enqueue limits,
-- the broker wake-ups, the capped tenants' slots. A job on a
-- PostgreSQL-path queue without limits needs none of them, and that is
-- the everyday enqueue. Now one query first asks whether any inserted job
-- is on a broker queue or a queue with enqueue limits, and the trigger
-- returns when none is: the triggers' share of a one-job enqueue
-- transaction fell from 27-32 % to 12-20 % (docs/benchmarks.md, "Where the
-- single-job enqueue's time goes"). The
-- rest of the function is as migration 20261201000010 made it.

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
    IF capped_queues IS NOT NULL THEN
        PERFORM jobwire_ensure_tenant_slots(g.queue, g.tenant, jobwire_tenant_cap(g.queue, g.tenant))
        FROM unnest(capped_queues, capped_tenants) AS g(queue, tenant);
        PERFORM jobwire_hand_out_free_slots(capped_queues, capped_tenants, NULL);
    END IF;
    RETURN NULL;
END;
$$;
