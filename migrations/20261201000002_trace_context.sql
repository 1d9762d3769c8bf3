-- jobwire schema: W3C trace context, from the enqueue to every attempt.
--
-- An enqueue made inside a traced request records the caller's span as
-- `traceparent` / `tracestate` (https://www.w3.org/TR/trace-context/) on the
-- job. Its wake-ups carry them as message headers, through the relay, to
-- the broker (AMQP headers, SQS message attributes, Kafka headers); the
-- worker's span for each attempt links to that span (a link, not a parent:
-- attempts and retries run long after the request ended).

-- NOT VALID: the columns are new, so no existing row can break the checks,
-- and validating would scan the whole table under the lock every claim
-- waits on. New and updated rows are checked all the same.
ALTER TABLE jobs
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate text,
    ADD CONSTRAINT jobs_traceparent_format
        CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID,
    ADD CONSTRAINT jobs_tracestate_size
        CHECK (tracestate IS NULL OR (octet_length(tracestate) <= 512 AND traceparent IS NOT NULL))
        NOT VALID;
ALTER TABLE jobs_history ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- The wake-up message gains the trace headers (NULLs are left out).
DROP FUNCTION jobwire_wake_up(uuid, bigint, text, text, text);
CREATE FUNCTION jobwire_wake_up(
    job_id uuid,
    generation bigint,
    queue text,
    job_type text,
    reason text DEFAULT NULL,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL,
    OUT payload jsonb,
    OUT headers jsonb)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object('job_id', job_id, 'generation', generation,
                              'queue', queue, 'job_type', job_type),
           jsonb_strip_nulls(jsonb_build_object(
               'content-type', 'application/json',
               'jobwire-kind', 'wake-up',
               'jobwire-job-id', job_id::text,
               'jobwire-generation', generation::text,
               'jobwire-reason', reason,
               'traceparent', traceparent,
               'tracestate', tracestate))
$$;

CREATE OR REPLACE FUNCTION jobwire_wake_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT q.topic, n.job_id::text, w.payload, w.headers, n.run_after
    FROM new_jobs n
    JOIN job_queues q ON q.queue = n.queue AND q.dispatch = 'broker'
    CROSS JOIN LATERAL jobwire_wake_up(n.job_id, n.lease_generation, n.queue, n.job_type,
                                       NULL, n.traceparent, n.tracestate) w
    WHERE n.state IN ('QUEUED', 'RETRY_WAIT');

    PERFORM pg_notify('jobwire_jobs', d.queue)
    FROM (SELECT DISTINCT n.queue
          FROM new_jobs n
          LEFT JOIN job_queues q ON q.queue = n.queue
          WHERE n.state IN ('QUEUED', 'RETRY_WAIT')
            AND n.run_after <= now()
            AND coalesce(q.dispatch, 'postgres') = 'postgres') d;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION jobwire_wake_reclaimable() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wake_topic text;
BEGIN
    SELECT q.topic INTO wake_topic
    FROM job_queues q WHERE q.queue = NEW.queue AND q.dispatch = 'broker';
    IF wake_topic IS NOT NULL THEN
        INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
        SELECT wake_topic, NEW.job_id::text, w.payload, w.headers, NEW.run_after
        FROM jobwire_wake_up(NEW.job_id, NEW.lease_generation, NEW.queue, NEW.job_type,
                             NULL, NEW.traceparent, NEW.tracestate) w;
    ELSIF NEW.run_after <= now() THEN
        PERFORM pg_notify('jobwire_jobs', NEW.queue);
    END IF;
    RETURN NULL;
END;
$$;

-- The SQL enqueue accepts a trace context too.
DROP FUNCTION jobwire_enqueue(text, jsonb, text, integer, timestamptz, integer, text, uuid);
-- Enqueue one job. Call it with named arguments; every argument but
-- job_type has the Rust library's default:
--
--   SELECT * FROM jobwire_enqueue('send_email', payload => '{"userId": 42}',
--                                 dedup_key => 'welcome:42');
--
-- Returns the job's id and whether the dedup key was already held (then the
-- id is the existing job's and nothing was written). Invalid arguments raise
-- SQLSTATE JW400 with the argument's name in DETAIL; a payload over the
-- limit raises JW413. traceparent / tracestate are the W3C trace context of
-- the caller's span (the worker's attempt spans link to it); later
-- arguments (tenant) will be added with defaults, so calls with named
-- arguments keep working.
CREATE FUNCTION jobwire_enqueue(
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
    IF jobwire_enqueue.job_type IS NULL OR jobwire_enqueue.job_type ~ '^[[:space:]]*$' THEN
        RAISE EXCEPTION 'invalid job: job_type: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF octet_length(jobwire_enqueue.job_type) > 255 THEN
        RAISE EXCEPTION 'invalid job: job_type: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'job_type';
    END IF;
    IF jobwire_enqueue.queue IS NULL OR jobwire_enqueue.queue ~ '^[[:space:]]*$' THEN
        RAISE EXCEPTION 'invalid job: queue: must not be empty' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF octet_length(jobwire_enqueue.queue) > 255 THEN
        RAISE EXCEPTION 'invalid job: queue: longer than 255 bytes' USING ERRCODE = 'JW400', DETAIL = 'queue';
    END IF;
    IF jobwire_enqueue.priority IS NULL OR jobwire_enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'invalid job: priority: must be between -32768 and 32767, got %', jobwire_enqueue.priority
            USING ERRCODE = 'JW400', DETAIL = 'priority';
    END IF;
    IF jobwire_enqueue.max_attempts IS NULL OR jobwire_enqueue.max_attempts < 1 THEN
        RAISE EXCEPTION 'invalid job: max_attempts: must be at least 1, got %', jobwire_enqueue.max_attempts
            USING ERRCODE = 'JW400', DETAIL = 'max_attempts';
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
                               dedup_key, traceparent, tracestate)
        VALUES (coalesce(jobwire_enqueue.new_job_id, jobwire_uuidv7()),
                jobwire_enqueue.queue, jobwire_enqueue.job_type, jobwire_enqueue.priority::smallint,
                jobwire_enqueue.payload, jobwire_enqueue.max_attempts,
                coalesce(jobwire_enqueue.run_after, now()), jobwire_enqueue.dedup_key,
                jobwire_enqueue.traceparent, jobwire_enqueue.tracestate)
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
