-- jobwire schema: the wake-up claim takes the jobs handed a slot in one
-- statement.
--
-- On a broker queue with tenant caps, a completion hands its freed slot
-- to its tenant's next waiting job and wakes it through the outbox; the
-- consumer's wake-up claim (jobwire_claim_ids_capped) then claims it into
-- that slot. The function went through the ids one at a time: a SELECT
-- and an UPDATE per job, each planned at each call since migration
-- 20261207000003. Claiming 48 handed jobs took 19 to 24 ms in psql where one
-- statement for all of them takes 2 to 4 (docs/benchmarks.md, "The
-- wake-up claim takes the handed jobs in one statement"): a good part of
-- a capped tenant's round on a broker path, and of the slot hand-over the
-- fairness issue times.
--
-- Now the jobs that hold a slot are locked and claimed by one statement
-- when none of them is locked by another transaction (NOWAIT); the loop
-- takes the rest: jobs without a slot, which take a free one of their
-- tenant or are noted for the hand-out at commit, and a job handed its
-- slot since the statement looked, which, if another transaction holds
-- it, is given up at once with a fresh wake-up (as after the wait's
-- timeout) rather than waited for. When one of them is locked, the
-- statement is rolled back and the loop takes them all, as before: in
-- the ids' order, waiting up to a second for a handed job's lock
-- (migration 20261204000001). A claim waits only while it holds no lock
-- taken out of that order, so two claims never wait for each other.

CREATE OR REPLACE FUNCTION jobwire_claim_ids_capped(p_ids uuid[], p_owner text, p_lease_ms bigint,
                                         p_queues text[])
RETURNS SETOF jobs
LANGUAGE plpgsql
-- Planned at each call (migration 20261207000003): CREATE OR REPLACE
-- drops the setting it had.
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    id          uuid;
    job         jobs%ROWTYPE;
    cap         integer;
    taken       integer;
    locked      boolean;
    prior_limit text;
    capped_q    text[] := '{}';
    capped_t    text[] := '{}';
    done        uuid[] := '{}';
    claimed     jobs[];
    fell_back   boolean := true;
BEGIN
    -- The jobs handed a slot, in one statement, if none of them is locked:
    -- NOWAIT, so this statement waits for nothing and holds its locks only
    -- if it took them all. A lock met (a completion that passed one of
    -- them over, another claim of the same wake-up) rolls it back, locks
    -- included, and the loop below takes every job as before, in order.
    -- Collected before any is returned: rows returned from a block that
    -- then rolls back would be claims that never happened.
    BEGIN
        WITH handed AS (
            SELECT j.job_id
            FROM jobs j
            WHERE j.job_id = ANY(p_ids)
              AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
              AND j.tenant_slot IS NOT NULL
              AND array_position(p_queues, j.queue) IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = j.queue AND q.paused)
            ORDER BY j.job_id
            FOR UPDATE OF j NOWAIT
        ),
        claimed_now AS (
            UPDATE jobs j
            SET state = 'RUNNING',
                lease_owner = p_owner,
                lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
                lease_generation = j.lease_generation + 1,
                attempt_count = j.attempt_count + 1,
                heartbeat_at = now(),
                updated_at = now()
            FROM handed h
            WHERE j.job_id = h.job_id
            RETURNING j AS claimed_row
        )
        SELECT coalesce(array_agg(c.claimed_row ORDER BY (c.claimed_row).job_id), '{}')
        INTO claimed
        FROM claimed_now c;
        fell_back := false;
    EXCEPTION WHEN lock_not_available THEN
        claimed := '{}';
    END;
    FOREACH job IN ARRAY claimed LOOP
        done := done || job.job_id;
        RETURN NEXT job;
    END LOOP;
    FOR id IN SELECT DISTINCT u FROM unnest(p_ids) AS u WHERE u <> ALL(done) ORDER BY u LOOP
        SELECT j.* INTO job
        FROM jobs j
        WHERE j.job_id = id
          -- Not `j.state IN (...)`: see migration 20261201000011.
          AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
          AND array_position(p_queues, j.queue) IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = j.queue AND q.paused)
        FOR UPDATE OF j SKIP LOCKED;
        locked := FOUND;
        IF NOT locked THEN
            -- Only a job handed a slot is waited for: one without a slot
            -- is some other claimer's, or waits for a hand-over anyway.
            -- And only where the statement above fell back: then this
            -- claim holds no lock but those the loop took, in the ids'
            -- order, so two claims never wait for each other. Where it
            -- did not, it may hold locks of any id (also of rows it
            -- locked and then found changed), and a handed job another
            -- transaction still holds (handed its slot since that
            -- statement looked) is given up at once (NOWAIT), as after a
            -- timeout.
            prior_limit := current_setting('lock_timeout');
            BEGIN
                IF fell_back THEN
                    PERFORM set_config('lock_timeout', '1s', true);
                    SELECT j.* INTO job
                    FROM jobs j
                    WHERE j.job_id = id
                      AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
                      AND j.tenant_slot IS NOT NULL
                      AND array_position(p_queues, j.queue) IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM job_queues q
                                      WHERE q.queue = j.queue AND q.paused)
                    FOR UPDATE OF j;
                    locked := FOUND;
                    PERFORM set_config('lock_timeout', prior_limit, true);
                ELSE
                    SELECT j.* INTO job
                    FROM jobs j
                    WHERE j.job_id = id
                      AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
                      AND j.tenant_slot IS NOT NULL
                      AND array_position(p_queues, j.queue) IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM job_queues q
                                      WHERE q.queue = j.queue AND q.paused)
                    FOR UPDATE OF j NOWAIT;
                    locked := FOUND;
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                -- The block's setting is undone with it. The job keeps
                -- its slot, so it gets its wake-up again.
                locked := false;
                INSERT INTO job_outbox (topic, message_key, payload, headers)
                SELECT q.topic, j.job_id::text, w.payload, w.headers
                FROM jobs j
                JOIN job_queues q ON q.queue = j.queue AND q.dispatch = 'broker'
                CROSS JOIN LATERAL jobwire_wake_up(j.job_id, j.lease_generation, j.queue,
                                                   j.job_type, 'slot', j.traceparent,
                                                   j.tracestate) w
                WHERE j.job_id = id AND j.tenant_slot IS NOT NULL
                  AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT');
            END;
        END IF;
        CONTINUE WHEN NOT locked;
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
                IF taken IS NULL THEN
                    capped_q := capped_q || job.queue;
                    capped_t := capped_t || job.tenant;
                    CONTINUE;
                END IF;
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
    -- Noted after the loop, not in it: with SET CONSTRAINTS ALL IMMEDIATE
    -- the note hands out at once and holds the hand-out locks, and the
    -- loop may still wait for a row lock.
    IF cardinality(capped_q) > 0 THEN
        PERFORM jobwire_note_hand_out(capped_q, capped_t, false);
    END IF;
END;
$$;
