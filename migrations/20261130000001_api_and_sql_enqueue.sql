-- jobwire schema, part 12: what the HTTP API and other languages need.
--
-- * job_settings: settings every enqueue path reads from the database, so a
--   Rust service, the HTTP API and a Python service calling jobwire_enqueue
--   agree without sharing a config file. One row.
-- * job_api_tokens: bearer tokens of the HTTP API. Only a SHA-256 of each
--   secret is kept; the secret is shown once, when the token is created.
-- * jobwire_uuidv7(): time-ordered job ids from SQL (PostgreSQL 15 has no
--   uuidv7()), so rows enqueued from SQL stay index-local like the Rust ones.
-- * jobwire_enqueue(...): enqueue one job from any language, inside the
--   caller's own transaction, with the Rust library's validation, dedup and
--   wake-ups (the wake-up triggers fire for its INSERT as for any other).

CREATE TABLE job_settings (
    -- One row: the key is always true.
    singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- Largest payload an enqueue accepts, in bytes of its jsonb text form
    -- (payload::text). The jobs_payload_size constraint is the hard ceiling.
    max_payload_bytes  integer NOT NULL DEFAULT 65536
                       CHECK (max_payload_bytes BETWEEN 2 AND 1048576),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
INSERT INTO job_settings DEFAULT VALUES;

CREATE TABLE job_api_tokens (
    -- The public half of a token (`jw_<token_id>_<secret>`): how a presented
    -- token finds its row without comparing secrets in SQL.
    token_id       text PRIMARY KEY CHECK (token_id ~ '^[0-9a-f]{16}$'),
    -- Who the token is: the actor recorded in job_audit.
    name           text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'),
    scope          text NOT NULL CHECK (scope IN ('read', 'write', 'admin')),
    secret_sha256  bytea NOT NULL CHECK (octet_length(secret_sha256) = 32),
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
-- A name belongs to one live token; a revoked token's name may be reused.
CREATE UNIQUE INDEX job_api_tokens_live_name_idx ON job_api_tokens (name)
    WHERE revoked_at IS NULL;

-- A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits from
-- gen_random_uuid() with the version nibble turned from 4 (0100) into 7
-- (0111) by setting bits 52 and 53; the variant bits stay as generated.
CREATE FUNCTION jobwire_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1),
        53, 1),
        'hex')::uuid
$$;

-- Raised by an enqueue whose payload is over job_settings.max_payload_bytes.
-- SQLSTATE JW413; DETAIL is "<size> <limit>" for programs that want numbers.
CREATE FUNCTION jobwire_reject_payload(size integer, size_limit integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'payload is % bytes, over the limit of % bytes (store ids, not objects)', size, size_limit
        USING ERRCODE = 'JW413', DETAIL = size || ' ' || size_limit;
END;
$$;

-- Enqueue one job. Call it with named arguments; every argument but
-- job_type has the Rust library's default:
--
--   SELECT * FROM jobwire_enqueue('send_email', payload => '{"userId": 42}',
--                                 dedup_key => 'welcome:42');
--
-- Returns the job's id and whether the dedup key was already held (then the
-- id is the existing job's and nothing was written). Invalid arguments raise
-- SQLSTATE JW400 with the argument's name in DETAIL; a payload over the
-- limit raises JW413. Later arguments (tenant, trace context) will be added
-- with defaults, so calls with named arguments keep working.
CREATE FUNCTION jobwire_enqueue(
    job_type      text,
    payload       jsonb DEFAULT '{}',
    queue         text DEFAULT 'default',
    priority      integer DEFAULT 0,
    run_after     timestamptz DEFAULT NULL,
    max_attempts  integer DEFAULT 25,
    dedup_key     text DEFAULT NULL,
    new_job_id    uuid DEFAULT NULL,
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
        INSERT INTO jobs AS j (job_id, queue, job_type, priority, payload, max_attempts, run_after, dedup_key)
        VALUES (coalesce(jobwire_enqueue.new_job_id, jobwire_uuidv7()),
                jobwire_enqueue.queue, jobwire_enqueue.job_type, jobwire_enqueue.priority::smallint,
                jobwire_enqueue.payload, jobwire_enqueue.max_attempts,
                coalesce(jobwire_enqueue.run_after, now()), jobwire_enqueue.dedup_key)
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
