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
-- This gives those slots back. Declaring a queue's PostgreSQL path calls it
-- for that queue (crates/core/sql/upsert_queue.sql), and every reconciler
-- pass for every queue on that path (crates/core/sql/release_handed_slots.sql),
-- which catches what a statement running beside the move handed after it.
-- Each job is locked first, in key order (as the wake-up claims lock), and
-- its slot given back only if it still waits and still names that slot: a
-- job claimed meanwhile, or handed another slot, is left as it is.
CREATE FUNCTION jobwire_release_handed_slots(p_queues text[]) RETURNS integer
LANGUAGE sql AS $$
    WITH handed AS MATERIALIZED (
        SELECT j.job_id, s.queue, s.tenant, s.slot
        FROM job_tenant_slots s
        JOIN jobs j ON j.job_id = s.job_id AND j.tenant_slot = s.slot
        WHERE s.queue = ANY (p_queues) AND s.job_id IS NOT NULL
          AND j.state IN ('QUEUED', 'RETRY_WAIT')
        ORDER BY j.job_id
        FOR UPDATE OF j
    ),
    freed AS (
        UPDATE job_tenant_slots s
        SET job_id = NULL
        FROM handed h
        WHERE s.queue = h.queue AND s.tenant = h.tenant AND s.slot = h.slot
          AND s.job_id = h.job_id
        RETURNING 1
    ),
    cleared AS (
        UPDATE jobs j
        SET tenant_slot = NULL
        FROM handed h
        WHERE j.job_id = h.job_id AND j.tenant_slot = h.slot
        RETURNING 1
    )
    SELECT count(*)::integer FROM cleared
$$;
