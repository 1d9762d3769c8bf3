-- jobwire schema: the completion is planned at each call, for the table
-- it finds.
--
-- The completion (finish_many) stayed a prepared statement when the other
-- hot statements began to be planned at each call (migration
-- 20261207000003): sent unprepared, parsed and planned at each call, it
-- cost a sixth of a drain. But a prepared statement's plan is made by its
-- first runs, and a worker whose first completions ran while `jobs` was
-- empty (a quiet hour, a vacuumed table) kept a plan for a table of no
-- rows: it read the whole table, twice, to find the jobs it finished.
-- Measured (the test
-- `a_completion_planned_on_an_empty_table_reads_few_rows_after_a_burst`):
-- completing 10 jobs among 5,000 read 10,000 rows, on every completion,
-- until an ANALYZE of `jobs` (never, with autovacuum off).
--
-- The statement now runs in this function, planned at each call: PL/pgSQL
-- keeps it parsed for the session, so a call costs a plan, not a parse.
-- Two ways of keeping one plan were tried and dropped (docs/benchmarks.md,
-- "The completion planned on an empty table"): with sequential scans ruled
-- out, the kept plan still put `jobs` on the outside of a join and read it
-- whole (15,000 rows in the test); bounding every scan of `jobs` by the
-- finished ids as well made each of 2,000 ids probe the index for all
-- 2,000, and a drain ran at a tenth of its speed.
--
-- Nothing else in the statement changes. The rest of this header is its
-- own, as it was in crates/core/sql/finish_many.sql.
--
-- Record the outcome of many attempts in one statement, each fenced by
-- (job_id, lease_owner, lease_generation). A row missing from the result lost
-- its lease (swept, reclaimed, or already finished): the caller reports Fenced.
--
-- outcome: 'succeeded' | 'retry' | 'failed' | 'cancel_ack' | 'returned'
--   succeeded  -> SUCCEEDED (also from CANCEL_REQUESTED: the work was done)
--   any other outcome while CANCEL_REQUESTED -> CANCELLED
--   returned   -> RETRY_WAIT, due as before, the claim's attempt uncounted:
--                 a job claimed ahead that no handler started
--   retry      -> RETRY_WAIT at now() + retry_delay_ms, or FAILED when attempts are exhausted
--   failed     -> FAILED (fatal, dead letter)
--   cancel_ack -> only from CANCEL_REQUESTED
-- The CASE expressions read j.* so that they see the row as locked, even if a
-- cancel request landed while this statement waited for the lock.
-- Tenant slots: every outcome leaves RUNNING, so a job holding a slot gives it
-- back, here, as one set: the statement clears every finished job's slot
-- (so the row trigger jobs_release_tenant_slot, which serves sweeps, cancels
-- and hand edits, does not fire), then on a broker queue hands each freed
-- slot to one of its tenant's next due jobs holding none, with that job's
-- wake-up (reason `slot`), and frees the rest; on a PostgreSQL-path queue it
-- frees them and wakes the queue once. The trigger did the same for one job
-- at a time, with about eight statements per job and a second write of the
-- finished row (docs/benchmarks.md, "The set hand-over landed: what
-- stranded a job"). A job this statement looks at and passes over
-- (handed a slot by another completion since this statement's snapshot)
-- stays locked until the commit: its wake-up claim waits for that lock
-- (migration 20261204000001).
CREATE FUNCTION jobwire_finish_many(p_job_ids uuid[], p_generations bigint[], p_outcomes text[],
                                    p_retry_delays_ms bigint[], p_error_codes text[],
                                    p_error_messages text[], p_owner text)
RETURNS TABLE (job_id uuid, lease_generation bigint, state text, run_after timestamptz,
               cancel_latency_s float8)
LANGUAGE plpgsql
-- Planned at each call (see above).
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        UPDATE jobs j
        SET state = CASE
                WHEN o.outcome = 'succeeded' THEN 'SUCCEEDED'
                WHEN j.state = 'CANCEL_REQUESTED' THEN 'CANCELLED'
                WHEN o.outcome = 'returned' THEN 'RETRY_WAIT'
                WHEN o.outcome = 'retry' AND j.attempt_count < j.max_attempts THEN 'RETRY_WAIT'
                ELSE 'FAILED'
            END,
            run_after = CASE
                WHEN o.outcome = 'retry' AND j.state = 'RUNNING' AND j.attempt_count < j.max_attempts
                    THEN now() + o.retry_delay_ms * interval '1 millisecond'
                ELSE j.run_after
            END,
            finished_at = CASE
                WHEN o.outcome = 'returned' AND j.state = 'RUNNING' THEN NULL
                WHEN o.outcome = 'retry' AND j.state = 'RUNNING' AND j.attempt_count < j.max_attempts
                    THEN NULL
                ELSE now()
            END,
            last_error_code = CASE WHEN o.outcome IN ('succeeded', 'returned') THEN j.last_error_code
                                   ELSE o.error_code END,
            last_error = CASE WHEN o.outcome IN ('succeeded', 'returned') THEN j.last_error
                              ELSE o.error_message END,
            attempt_count = CASE WHEN o.outcome = 'returned' THEN j.attempt_count - 1
                                 ELSE j.attempt_count END,
            lease_owner = NULL,
            lease_expires_at = NULL,
            updated_at = now(),
            tenant_slot = NULL
        FROM unnest(p_job_ids, p_generations, p_outcomes, p_retry_delays_ms, p_error_codes,
                     p_error_messages)
            AS o(job_id, lease_generation, outcome, retry_delay_ms, error_code, error_message)
        WHERE j.job_id = o.job_id
          AND j.lease_generation = o.lease_generation
          AND j.lease_owner = p_owner
          AND (j.state = 'CANCEL_REQUESTED' OR (j.state = 'RUNNING' AND o.outcome <> 'cancel_ack'))
        RETURNING j.job_id, j.lease_generation, j.state, j.run_after,
                  -- Request -> CANCELLED, for the cancellation-latency histogram.
                  CASE WHEN j.state = 'CANCELLED'
                       THEN extract(epoch FROM now() - j.cancel_requested_at)::float8
                  END AS cancel_latency_s,
                  j.tenant
    ),
    -- The slots the jobs above held (only a job whose row names a slot holds
    -- one: the others skip the slot lookup, so a queue without caps reads no
    -- slot row, tenants or not), with the broker topic of a broker queue. The slot is read from
    -- the job's row as this statement's snapshot shows it, before `done`
    -- cleared it (an UPDATE returns only the new values), and the slot row is
    -- found by its key: job_id is in no index, so that a slot's change of
    -- holder writes none (migration 20261204000002). The snapshot names the
    -- slot the job holds: `done` found the job still in the attempt its lease
    -- fences, and a job keeps one slot from its claim until it leaves RUNNING.
    held AS (
        SELECT s.queue, s.tenant, s.slot, s.job_id, q.topic
        FROM done d
        JOIN jobs b ON b.job_id = d.job_id
        JOIN job_tenant_slots s
          ON s.queue = b.queue AND s.tenant = b.tenant AND s.slot = b.tenant_slot
         AND s.job_id = d.job_id
        LEFT JOIN job_queues q ON q.queue = s.queue AND q.dispatch = 'broker'
        WHERE d.tenant IS NOT NULL AND b.tenant_slot IS NOT NULL
    ),
    -- A broker queue's freed slots within the tenant's cap (a cap lowered
    -- since frees the slots above it), numbered per tenant.
    passing AS (
        SELECT h.queue, h.tenant, h.slot, h.topic,
               row_number() OVER (PARTITION BY h.queue, h.tenant ORDER BY h.slot) AS n
        FROM held h
        WHERE h.topic IS NOT NULL
          AND h.slot <= coalesce(jobwire_tenant_cap(h.queue, h.tenant), 0)
    ),
    -- As many of each tenant's next due jobs holding no slot, in claim order.
    -- The tenant as a range and in the order, as in the capped claim: a walk
    -- of jobs_tenant_claimable_idx. MATERIALIZED: it locks rows, so it must be
    -- run once however often it is read (PostgreSQL never inlines such a CTE;
    -- this says so).
    next_jobs AS MATERIALIZED (
        SELECT g.queue, g.tenant, x.job_id, x.lease_generation, x.job_type, x.traceparent,
               x.tracestate,
               row_number() OVER (PARTITION BY g.queue, g.tenant
                                  ORDER BY x.priority, x.run_after, x.job_id) AS n
        FROM (SELECT p.queue, p.tenant, count(*) AS k FROM passing p GROUP BY p.queue, p.tenant) g
        CROSS JOIN LATERAL (
            SELECT j.job_id, j.lease_generation, j.job_type, j.traceparent, j.tracestate,
                   j.priority, j.run_after
            FROM jobs j
            WHERE j.queue = g.queue AND j.tenant >= g.tenant AND j.tenant <= g.tenant
              AND j.state IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
              AND j.tenant_slot IS NULL
            ORDER BY j.tenant, j.priority, j.run_after, j.job_id
            LIMIT g.k
            FOR UPDATE OF j SKIP LOCKED
        ) x
    ),
    -- The k-th freed slot of a tenant goes to its k-th next job.
    handed AS (
        SELECT p.queue, p.tenant, p.slot, p.topic, x.job_id, x.lease_generation, x.job_type,
               x.traceparent, x.tracestate
        FROM passing p
        JOIN next_jobs x ON x.queue = p.queue AND x.tenant = p.tenant AND x.n = p.n
    ),
    -- Every held slot row names its new holder, or no one.
    slots AS (
        UPDATE job_tenant_slots s
        SET job_id = h.job_id
        FROM held f
        LEFT JOIN handed h ON h.queue = f.queue AND h.tenant = f.tenant AND h.slot = f.slot
        WHERE s.queue = f.queue AND s.tenant = f.tenant AND s.slot = f.slot
          AND s.job_id = f.job_id
        RETURNING s.queue, f.topic
    ),
    -- updated_at: when the slot was handed over, which the safety net's claim
    -- reads (migration 20261203000006).
    reserved AS (
        UPDATE jobs j
        SET tenant_slot = h.slot, updated_at = now()
        FROM handed h
        WHERE j.job_id = h.job_id
        RETURNING j.job_id
    ),
    wake_ups AS (
        INSERT INTO job_outbox (topic, message_key, payload, headers)
        SELECT h.topic, h.job_id::text, w.payload, w.headers
        FROM handed h
        CROSS JOIN LATERAL jobwire_wake_up(h.job_id, h.lease_generation, h.queue, h.job_type,
                                           'slot', h.traceparent, h.tracestate) w
        RETURNING 1
    ),
    -- A broker queue's slots freed within the cap and handed to no job (the
    -- tenant had nothing waiting that this statement could see): noted for
    -- the hand-out at commit, which waits for producers of those tenants
    -- between their own hand-out and their commit and gives the slots to what
    -- is waiting then (migration 20261206000010). Read after `slots` and
    -- `reserved` have written (their rows counted first), not by the order of
    -- the final query's subqueries: under SET CONSTRAINTS ALL IMMEDIATE the
    -- note's trigger hands out at once, and must find the slots freed and the
    -- jobs this statement handed slots to holding them (a write CTE no one
    -- reads runs after the main query: that job was handed a second slot, and
    -- `reserved` then failed on the row the trigger had changed).
    noted AS (
        SELECT jobwire_note_hand_out(array_agg(f.queue), array_agg(f.tenant), true)
        FROM (SELECT count(*) FROM slots) written,
             (SELECT count(*) FROM reserved) marked,
             (SELECT DISTINCT p.queue, p.tenant
              FROM passing p
              LEFT JOIN handed h ON h.queue = p.queue AND h.tenant = p.tenant AND h.slot = p.slot
              WHERE h.job_id IS NULL) f
        HAVING count(*) > 0
    ),
    -- One notification per PostgreSQL-path queue that got a slot back, if this
    -- transaction takes the queue's wake token (as every other wake-up does).
    woken AS (
        SELECT pg_notify('jobwire_jobs', f.queue)
        FROM (SELECT DISTINCT s.queue FROM slots s WHERE s.topic IS NULL) f
        WHERE jobwire_wake_token('jobwire_jobs', f.queue)
    )
    SELECT d.job_id, d.lease_generation, d.state, d.run_after, d.cancel_latency_s
    FROM done d
    -- A CTE that writes nothing runs only if read: this reads `woken` and
    -- `noted` once, before the first row, whatever their counts. (The CTEs
    -- that write run whether read or not.)
    WHERE (SELECT count(*) FROM woken) >= 0 AND (SELECT count(*) FROM noted) >= 0;
END;
$$;
