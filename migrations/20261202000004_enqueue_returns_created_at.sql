-- jobwire schema: the enqueue returns each job's created_at.
--
-- POST /jobs answers with the job it wrote. It read that job back with a
-- second statement (job_status), one of the three statements an HTTP
-- enqueue made (token lookup, enqueue, read) against the library's one
-- (docs/benchmarks.md, "The HTTP producer"). Everything the answer shows
-- for a new job is what the caller sent, what the enqueue already
-- returned, or the insert's defaults, except when the database wrote it:
-- so the enqueue now returns created_at too (a new job's updated_at is the
-- same instant), and the API reads a job back only for a duplicate, whose
-- row may have moved on since it was written.
--
-- A function's result type cannot be changed in place: it is dropped and
-- made again, the statement otherwise as migration 20261202000001 wrote it
-- (see there for why it is a function and how it plans).

DROP FUNCTION jobwire_enqueue_rows(uuid[], text[], text[], smallint[], jsonb[], integer[],
                                   timestamptz[], bigint[], text[], text[], text[], text[]);

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
RETURNS TABLE (ord bigint, job_id uuid, duplicate boolean, state text, run_after timestamptz,
               created_at timestamptz)
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
        RETURNING job_id, job_type, dedup_key, state, run_after, created_at
    )
    SELECT i.ord,
           coalesce(mine.job_id, sibling.job_id, existing.job_id) AS job_id,
           mine.job_id IS NULL AS duplicate,
           coalesce(mine.state, sibling.state, existing.state) AS state,
           coalesce(mine.run_after, sibling.run_after, existing.run_after) AS run_after,
           coalesce(mine.created_at, sibling.created_at, existing.created_at) AS created_at
    FROM input i
    LEFT JOIN inserted mine ON mine.job_id = i.job_id
    LEFT JOIN inserted sibling
           ON mine.job_id IS NULL
          AND sibling.job_type = i.job_type
          AND sibling.dedup_key = i.dedup_key
    -- The committed holder of a key, looked up only for a row that was not
    -- inserted: the conditions on mine and sibling name no column of jobs, so
    -- they gate the lookup (a one-time filter), so a new job reads no other job.
    -- (Migration 20261202000001 says what the plain join did instead.)
    LEFT JOIN LATERAL (
        SELECT j.job_id, j.state, j.run_after, j.created_at
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
