-- jobwire schema: the enqueue statement is planned once per session.
--
-- The enqueue (until now sent by the client as one statement,
-- crates/core/sql/enqueue_many.sql) reads its jobs from arrays. A prepared
-- statement with array parameters is planned afresh on every execution:
-- PostgreSQL plans the first five executions with the values (custom
-- plans), and a custom plan sees how long each array is, so the generic
-- plan, estimated for arrays of unknown length, always looks dearer and is
-- never chosen. Planning this statement costs about 0.3 ms of CPU, more
-- than running it for one job (about 0.25 ms): with eight producers
-- enqueuing one job per transaction, planning was the largest single share
-- of the database's CPU (docs/benchmarks.md, "The enqueue was planned on
-- every call").
--
-- As a function with plan_cache_mode = force_generic_plan, PL/pgSQL plans
-- the statement once per session and keeps the plan; the client's own
-- statement, a call of this function, is cheap to plan. The generic plan
-- joins with hashes whatever the batch's size (1 or 1,000 jobs), and reads
-- no other job for a new one (crates/core/tests/plans.rs checks the plan
-- as made on an empty table, then run on a full one).
--
-- The statement is unchanged. Its parameters are the arrays below, one
-- element per job, referenced as $1 ... $12; it returns one row per input
-- row, in input order: the new job, or (duplicate = true) the job that
-- already holds the same (job_type, dedup_key), committed earlier or
-- earlier in this same batch. A NULL job_id means the key is held by a
-- transaction that committed while the statement ran; the caller retries
-- those rows (a new statement, a fresh snapshot). Wake-ups are written by
-- the triggers: an outbox row by jobs_wake_inserted (a capped tenant's only
-- with a slot), a NOTIFY at commit by jobs_wake_at_commit. A payload over
-- job_settings.max_payload_bytes (the one limit every enqueue path reads)
-- fails the whole statement with SQLSTATE JW413: nothing is written. The
-- limit is read as an aggregate, one row whatever the planner thinks of
-- the settings table, so it never multiplies the row estimate (which once
-- tipped this statement into JIT compilation).

CREATE FUNCTION jobwire_enqueue_rows(
    p_job_ids      uuid[],
    p_queues       text[],
    p_job_types    text[],
    p_priorities   smallint[],
    p_payloads     jsonb[],
    p_max_attempts integer[],
    p_run_ats      timestamptz[],
    p_delays_ms    bigint[],
    p_dedup_keys   text[],
    p_traceparents text[],
    p_tracestates  text[],
    p_tenants      text[])
RETURNS TABLE (ord bigint, job_id uuid, duplicate boolean, state text, run_after timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH payload_limit AS (
        SELECT coalesce(max(max_payload_bytes), 1048576) AS max_bytes FROM job_settings
    ),
    input AS (
        SELECT *
        FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::jsonb[],
                    $6::integer[], $7::timestamptz[], $8::bigint[], $9::text[],
                    $10::text[], $11::text[], $12::text[])
            WITH ORDINALITY AS t(job_id, queue, job_type, priority, payload,
                                 max_attempts, run_at, delay_ms, dedup_key,
                                 traceparent, tracestate, tenant, ord)
    ),
    inserted AS (
        INSERT INTO jobs (job_id, queue, job_type, priority, payload, max_attempts, run_after, dedup_key,
                          traceparent, tracestate, tenant)
        SELECT i.job_id, i.queue, i.job_type, i.priority, i.payload, i.max_attempts,
               coalesce(i.run_at, now() + coalesce(i.delay_ms, 0) * interval '1 millisecond'),
               i.dedup_key, i.traceparent, i.tracestate, i.tenant
        FROM input i
        CROSS JOIN payload_limit l
        WHERE CASE WHEN octet_length(i.payload::text) > l.max_bytes
                   THEN jobwire_reject_payload(octet_length(i.payload::text), l.max_bytes)
                   ELSE true END
        ORDER BY i.ord
        ON CONFLICT (job_type, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
        RETURNING job_id, job_type, dedup_key, state, run_after
    )
    SELECT i.ord,
           coalesce(mine.job_id, sibling.job_id, existing.job_id) AS job_id,
           mine.job_id IS NULL AS duplicate,
           coalesce(mine.state, sibling.state, existing.state) AS state,
           coalesce(mine.run_after, sibling.run_after, existing.run_after) AS run_after
    FROM input i
    LEFT JOIN inserted mine ON mine.job_id = i.job_id
    LEFT JOIN inserted sibling
           ON mine.job_id IS NULL
          AND sibling.job_type = i.job_type
          AND sibling.dedup_key = i.dedup_key
    -- The committed holder of a key, looked up only for a row that was not
    -- inserted: the conditions on mine and sibling name no column of jobs, so
    -- they gate the lookup (a one-time filter), so a new job reads no other job.
    -- As a plain join it was planned as a hash join over a sequential scan of
    -- jobs whenever the plan was made while the table looked small, and a
    -- prepared statement kept that plan as the table filled: every enqueue
    -- then read the whole table (5 ms instead of 1 for one job among 10,000).
    LEFT JOIN LATERAL (
        SELECT j.job_id, j.state, j.run_after
        FROM jobs j
        WHERE mine.job_id IS NULL
          AND sibling.job_id IS NULL
          AND j.job_type = i.job_type
          AND j.dedup_key = i.dedup_key
        -- The key is unique, so LIMIT 1 changes no answer; it keeps the planner
        -- from flattening the subquery back into the join.
        LIMIT 1
    ) existing ON true
    ORDER BY i.ord;
END;
$$;
