-- jobwire schema: a queue moved to a broker wakes its waiting jobs.
--
-- A job enqueued on the PostgreSQL path gets a NOTIFY and no outbox row. A
-- queue moved to a broker (from the PostgreSQL path, from no declaration,
-- which is the PostgreSQL path, or to another topic) kept its waiting jobs
-- without a wake-up on the new path: only the reconciler found them, a grace
-- period (1 min by default) after each was due, or the safety net, after
-- 3 min. A team moving a queue with a backlog saw it stall for that long.
--
-- Declaring a queue's dispatch is now one function, which reads the
-- queue's previous path under a lock before it changes it:
-- * declared on the PostgreSQL path: the tenant slots a broker hand-over
--   left with waiting jobs are given back, as before (migration
--   20261206000003);
-- * moved to a broker: every waiting job gets the wake-up its enqueue on
--   that path would have written: at once if due, at its `run_after` if
--   not; a due job of a capped tenant only with a slot, the tenant's free
--   slots handed out now (as a resume does). A paused queue's due jobs are
--   left to its resume, which wakes them.
-- * declared again as it was: nothing else is written.
--
-- A producer's transaction that began before the move and commits after it
-- can still leave a job without a wake-up; the reconciler finds it after
-- its grace, as before.
CREATE FUNCTION jobwire_declare_dispatch(p_queue text, p_dispatch text, p_topic text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    was_dispatch text;
    was_topic    text;
    is_paused    boolean;
    woken        integer;
BEGIN
    -- The queue's row is made first (a queue never declared is on the
    -- PostgreSQL path, the column's default) and locked, so that two
    -- declarations of one queue, as of workers started together, see each
    -- other's path: the second finds the queue moved and wakes nothing.
    INSERT INTO job_queues (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    SELECT q.dispatch, q.topic INTO was_dispatch, was_topic
    FROM job_queues q WHERE q.queue = p_queue
    FOR UPDATE;

    INSERT INTO job_queues (queue, dispatch, topic)
    VALUES (p_queue, p_dispatch, p_topic)
    ON CONFLICT (queue) DO UPDATE
    SET dispatch = excluded.dispatch, topic = excluded.topic, updated_at = now()
    RETURNING paused INTO is_paused;

    IF p_dispatch = 'postgres' THEN
        RETURN jobwire_release_handed_slots(ARRAY[p_queue]);
    END IF;
    IF was_dispatch = 'broker' AND was_topic IS NOT DISTINCT FROM p_topic THEN
        RETURN 0;
    END IF;

    WITH written AS (
        INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
        SELECT p_topic, j.job_id::text, w.payload, w.headers, greatest(j.run_after, now())
        FROM jobs j
        CROSS JOIN LATERAL jobwire_wake_up(j.job_id, j.lease_generation, j.queue, j.job_type, 'moved',
                                           j.traceparent, j.tracestate) w
        WHERE j.queue = p_queue
          AND j.state IN ('QUEUED', 'RETRY_WAIT')
          AND (j.run_after > now()
               OR (NOT is_paused
                   AND (j.tenant IS NULL OR j.tenant_slot IS NOT NULL
                        OR jobwire_tenant_cap(j.queue, j.tenant) IS NULL)))
        RETURNING 1
    )
    SELECT count(*)::integer INTO woken FROM written;

    IF is_paused THEN
        RETURN woken;
    END IF;
    -- A job that holds a slot (moved from one topic to another) is timed
    -- by the safety net from its latest wake-up, as after a hand-over. Not
    -- waited for if locked: the reconciler's release of handed slots locks
    -- such jobs, then this queue's row, which this transaction holds.
    UPDATE jobs j SET updated_at = now()
    WHERE j.job_id IN (SELECT h.job_id FROM jobs h
                       WHERE h.queue = p_queue AND h.state IN ('QUEUED', 'RETRY_WAIT')
                         AND h.run_after <= now() AND h.tenant_slot IS NOT NULL
                       FOR UPDATE SKIP LOCKED);
    RETURN woken + jobwire_hand_out_to_waiting_tenants(ARRAY[p_queue], 'moved');
END;
$$;
