-- jobwire schema: a blank name is one of Unicode's white space only, here
-- as in Rust.
--
-- The SQL enqueue refused a blank job type, queue or tenant with
-- `[[:space:]]`, whose meaning beyond ASCII depends on the database's
-- locale: under C.UTF-8 it takes an em space (U+2003) as space but not a
-- no-break space (U+00A0). A tenant of no-break spaces alone was taken by
-- the SQL enqueue and refused by the Rust one, which trims Unicode's
-- White_Space (`str::trim`). Both now refuse the same names: the set is
-- spelled out, as Rust's `char::is_whitespace` has it, in a function the
-- enqueue calls.
--
-- The tables' own checks on a tenant (`jobs`, `job_tenants`,
-- `job_schedules`, `job_api_tokens`) keep `[[:space:]]`: a check, even
-- one added NOT VALID, holds on every update of a row, and a job of such a
-- tenant already waiting would then fail every claim and completion that
-- touched it. Every interface refuses the name before it reaches them.

-- True for text of Unicode White_Space characters only (or none):
-- U+0009–U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028,
-- U+2029, U+202F, U+205F, U+3000.
CREATE OR REPLACE FUNCTION jobwire_name_is_blank(candidate text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT candidate ~ '^[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$'
$$;

-- The enqueue as in 20261206000009, its blank checks through the function.
CREATE OR REPLACE FUNCTION jobwire_enqueue(
    job_type      text,
    payload       jsonb DEFAULT '{}',
    queue         text DEFAULT 'default',
    priority      integer DEFAULT 0,
    run_after     timestamptz DEFAULT NULL,
    max_attempts  integer DEFAULT 25,
    dedup_key     text DEFAULT NULL,
    new_job_id    uuid DEFAULT NULL,
    traceparent   text DEFAULT NULL,
    tracestate    text DEFAULT NULL,
    tenant        text DEFAULT NULL,
    OUT job_id    uuid,
    OUT duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    max_bytes integer;
    size      integer;
    inserted  uuid;
BEGIN
    -- The same rules, in the same order, as Enqueuer::validate in Rust; a
    -- test runs one table of cases through both.
    IF jobwire_enqueue.job_type IS NULL OR jobwire_name_is_blank(jobwire_enqueue.job_type) THEN
        RAISE EXCEPTION 'invalid job: job_type: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF octet_length(jobwire_enqueue.job_type) > 255 THEN
        RAISE EXCEPTION 'invalid job: job_type: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF jobwire_enqueue.job_type ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'invalid job: job_type: must not hold control characters (a newline, a tab, an escape)' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF jobwire_enqueue.queue IS NULL OR jobwire_name_is_blank(jobwire_enqueue.queue) THEN
        RAISE EXCEPTION 'invalid job: queue: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF octet_length(jobwire_enqueue.queue) > 255 THEN
        RAISE EXCEPTION 'invalid job: queue: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF jobwire_enqueue.queue ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'invalid job: queue: must not hold control characters (a newline, a tab, an escape)' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF jobwire_enqueue.priority IS NULL OR jobwire_enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'invalid job: priority: must be between -32768 and 32767, got %', jobwire_enqueue.priority
            USING ERRCODE = 'JW400', DETAIL = 'priority';
    END IF;
    IF jobwire_enqueue.max_attempts IS NULL OR jobwire_enqueue.max_attempts < 1 THEN
        RAISE EXCEPTION 'invalid job: max_attempts: must be at least 1, got %', jobwire_enqueue.max_attempts
            USING ERRCODE = 'JW400', DETAIL = 'max_attempts';
    END IF;
    IF jobwire_enqueue.run_after IS NOT NULL
       AND NOT (jobwire_enqueue.run_after >= '0001-01-01 00:00:00+00'
                AND jobwire_enqueue.run_after < '10000-01-01 00:00:00+00') THEN
        RAISE EXCEPTION 'invalid job: run_after: must be in the years 1 to 9999 (UTC), got %', jobwire_enqueue.run_after
            USING ERRCODE = 'JW400', DETAIL = 'run_after';
    END IF;
    IF jobwire_enqueue.dedup_key IS NOT NULL
       AND (jobwire_enqueue.dedup_key = '' OR octet_length(jobwire_enqueue.dedup_key) > 1024) THEN
        RAISE EXCEPTION 'invalid job: dedup_key: must be 1 to 1024 bytes' USING ERRCODE = 'JW400', DETAIL = 'dedup_key';
    END IF;
    IF jobwire_enqueue.traceparent IS NOT NULL
       AND (jobwire_enqueue.traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            OR jobwire_enqueue.traceparent ~ '^ff-'
            OR jobwire_enqueue.traceparent ~ '^..-0{32}-'
            OR jobwire_enqueue.traceparent ~ '-0{16}-..$') THEN
        RAISE EXCEPTION 'invalid job: traceparent: not a W3C traceparent (version-traceid-spanid-flags in lowercase hex, ids not all zero)'
            USING ERRCODE = 'JW400', DETAIL = 'traceparent';
    END IF;
    IF jobwire_enqueue.tracestate IS NOT NULL
       AND (jobwire_enqueue.traceparent IS NULL OR octet_length(jobwire_enqueue.tracestate) > 512) THEN
        RAISE EXCEPTION 'invalid job: tracestate: at most 512 bytes, and only with a traceparent'
            USING ERRCODE = 'JW400', DETAIL = 'tracestate';
    END IF;
    IF jobwire_enqueue.tenant IS NOT NULL AND jobwire_name_is_blank(jobwire_enqueue.tenant) THEN
        RAISE EXCEPTION 'invalid job: tenant: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'tenant';
    END IF;
    IF octet_length(jobwire_enqueue.tenant) > 255 THEN
        RAISE EXCEPTION 'invalid job: tenant: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'tenant';
    END IF;
    IF jobwire_enqueue.tenant ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'invalid job: tenant: must not hold control characters (a newline, a tab, an escape)' USING ERRCODE = 'JW400', DETAIL = 'tenant';
    END IF;
    -- Taken ids are the caller's mistake, said as one; a race with a
    -- concurrent enqueue of the same id still meets the primary key.
    IF jobwire_enqueue.new_job_id IS NOT NULL
       AND (EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = jobwire_enqueue.new_job_id)
            OR EXISTS (SELECT 1 FROM jobs_history h WHERE h.job_id = jobwire_enqueue.new_job_id)) THEN
        RAISE EXCEPTION 'invalid job: new_job_id: % is already a job''s id', jobwire_enqueue.new_job_id
            USING ERRCODE = 'JW400', DETAIL = 'new_job_id';
    END IF;
    IF jobwire_enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'invalid job: payload: must not be NULL (use ''{}'')' USING ERRCODE = 'JW400', DETAIL = 'payload';
    END IF;
    SELECT s.max_payload_bytes INTO max_bytes FROM job_settings s;
    size := octet_length(jobwire_enqueue.payload::text);
    IF size > coalesce(max_bytes, 1048576) THEN
        PERFORM jobwire_reject_payload(size, coalesce(max_bytes, 1048576));
    END IF;

    -- A concurrent enqueue of the same key either commits first (ON CONFLICT
    -- waits for it, then the SELECT, with a fresh snapshot, sees its row) or
    -- rolls back (then our INSERT goes ahead). Under REPEATABLE READ the
    -- committed row can stay invisible: after three rounds, give up with a
    -- serialization failure, which the caller retries.
    FOR attempt IN 1..3 LOOP
        INSERT INTO jobs AS j (job_id, queue, job_type, priority, payload, max_attempts, run_after,
                               dedup_key, traceparent, tracestate, tenant)
        VALUES (coalesce(jobwire_enqueue.new_job_id, jobwire_uuidv7()),
                jobwire_enqueue.queue, jobwire_enqueue.job_type, jobwire_enqueue.priority::smallint,
                jobwire_enqueue.payload, jobwire_enqueue.max_attempts,
                coalesce(jobwire_enqueue.run_after, now()), jobwire_enqueue.dedup_key,
                jobwire_enqueue.traceparent, jobwire_enqueue.tracestate, jobwire_enqueue.tenant)
        ON CONFLICT (job_type, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
        RETURNING j.job_id INTO inserted;
        IF inserted IS NOT NULL THEN
            job_id := inserted;
            duplicate := false;
            RETURN;
        END IF;
        SELECT j.job_id INTO inserted
        FROM jobs j
        WHERE j.job_type = jobwire_enqueue.job_type AND j.dedup_key = jobwire_enqueue.dedup_key;
        IF inserted IS NOT NULL THEN
            job_id := inserted;
            duplicate := true;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'could not resolve dedup key % for job type %: concurrent enqueues',
        jobwire_enqueue.dedup_key, jobwire_enqueue.job_type
        USING ERRCODE = 'serialization_failure';
END;
$$;
