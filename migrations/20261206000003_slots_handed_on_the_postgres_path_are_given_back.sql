-- jobwire schema: tenant slots handed to waiting jobs of a queue on the
-- PostgreSQL path are given back.
--
-- On a broker queue a completion (as do the enqueue, a resume and the
-- reconciler's hand-out) hands a capped tenant's free slot to its next
-- waiting job along with that job's wake-up, and only the broker path's
-- claim takes a waiting job that holds a slot. A queue moved to the
-- PostgreSQL path can keep such jobs: handed before the move, or by a
-- statement that began before it and committed after (a completion, a
-- producer's transaction). Nothing on the PostgreSQL path claims them: they
-- would wait for ever, their slots held.
--
-- This gives those slots back and wakes the queue's workers. Declaring a
-- queue's PostgreSQL path calls it for that queue
-- (crates/core/sql/upsert_queue.sql), and every reconciler pass for every
-- queue on that path (crates/core/sql/release_handed_slots.sql), which
-- catches what a statement running beside the move handed after it.
--
-- * Only on a queue that is on the PostgreSQL path as this function reads
--   it, its row share-locked so that a move back to a broker waits for
--   this (the reconciler picks its queues in an older snapshot).
-- * A job locked by someone else (a claim taking it, a completion) is
--   skipped, not waited for: the next pass looks again. A waiting job
--   whose slot changed, or that was claimed, since the slot row was read is
--   left alone (the lock re-checks the state and the slot it names).
-- * The job's slot is cleared only where its slot row was freed, so that
--   neither is changed without the other.
CREATE FUNCTION jobwire_release_handed_slots(p_queues text[]) RETURNS integer
LANGUAGE sql AS $$
    WITH handed AS MATERIALIZED (
        SELECT j.job_id, s.queue, s.tenant, s.slot
        FROM job_tenant_slots s
        JOIN job_queues q ON q.queue = s.queue AND q.dispatch = 'postgres'
        JOIN jobs j ON j.job_id = s.job_id AND j.tenant_slot = s.slot
        WHERE s.queue = ANY (p_queues) AND s.job_id IS NOT NULL
          AND j.state IN ('QUEUED', 'RETRY_WAIT')
        ORDER BY j.job_id
        FOR UPDATE OF j SKIP LOCKED
        FOR SHARE OF q
    ),
    freed AS (
        UPDATE job_tenant_slots s
        SET job_id = NULL
        FROM handed h
        WHERE s.queue = h.queue AND s.tenant = h.tenant AND s.slot = h.slot
          AND s.job_id = h.job_id
        RETURNING h.job_id, h.slot
    ),
    cleared AS (
        UPDATE jobs j
        SET tenant_slot = NULL
        FROM freed f
        WHERE j.job_id = f.job_id AND j.tenant_slot = f.slot
        RETURNING j.queue
    ),
    -- One notification per queue that got a slot back, if this transaction
    -- takes the queue's wake token (as every other wake-up does).
    woken AS (
        SELECT pg_notify('jobwire_jobs', c.queue)
        FROM (SELECT DISTINCT queue FROM cleared) c
        WHERE jobwire_wake_token('jobwire_jobs', c.queue)
    )
    -- `woken` writes nothing, so it runs only if read: read it here.
    SELECT (SELECT count(*)::integer FROM cleared)
    WHERE (SELECT count(*) FROM woken) >= 0
$$;
