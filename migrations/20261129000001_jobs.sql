-- jobwire schema, part 1: the jobs table, the source of truth.
--
-- Column names and state spellings are a contract (docs/architecture.md):
-- operators' SQL, dashboards and external checks rely on them.

-- Queues and how they are dispatched. A queue missing from this table is a
-- PostgreSQL-path queue (workers claim it with SKIP LOCKED, woken by NOTIFY).
-- A queue with dispatch = 'broker' gets a wake-up row in job_outbox, on `topic`,
-- every time one of its jobs becomes claimable.
CREATE TABLE job_queues (
    queue        text PRIMARY KEY CHECK (queue <> ''),
    dispatch     text NOT NULL DEFAULT 'postgres' CHECK (dispatch IN ('postgres', 'broker')),
    topic        text CHECK (topic <> ''),
    paused       boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_queues_broker_has_topic CHECK (dispatch = 'postgres' OR topic IS NOT NULL)
);

CREATE TABLE jobs (
    job_id            uuid PRIMARY KEY,
    queue             text NOT NULL DEFAULT 'default' CHECK (queue <> ''),
    job_type          text NOT NULL CHECK (job_type <> ''),
    -- Lower runs first (0 is the default and the most urgent of the usual range).
    priority          smallint NOT NULL DEFAULT 0,
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    state             text NOT NULL DEFAULT 'QUEUED',
    attempt_count     integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    max_attempts      integer NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
    run_after         timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    -- The fencing token: raised by every claim, carried by every write that
    -- leaves RUNNING. A worker holding an older generation changes nothing.
    lease_generation  bigint NOT NULL DEFAULT 0 CHECK (lease_generation >= 0),
    heartbeat_at      timestamptz,
    dedup_key         text CHECK (dedup_key <> ''),
    last_error_code   text,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,

    CONSTRAINT jobs_state_valid CHECK (state IN (
        'QUEUED', 'RUNNING', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED',
        'CANCEL_REQUESTED', 'CANCELLED')),
    -- A lease exists exactly while a worker holds the job.
    CONSTRAINT jobs_lease_iff_held CHECK (
        (state IN ('RUNNING', 'CANCEL_REQUESTED'))
            = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
        AND (lease_owner IS NULL) = (lease_expires_at IS NULL)),
    -- finished_at is set exactly on the terminal states.
    CONSTRAINT jobs_finished_iff_terminal CHECK (
        (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) = (finished_at IS NOT NULL)),
    -- A running job has been claimed at least once.
    CONSTRAINT jobs_running_was_claimed CHECK (
        state NOT IN ('RUNNING', 'CANCEL_REQUESTED')
            OR (attempt_count >= 1 AND lease_generation >= 1)),
    -- Hard ceiling on payload size; the library enforces a smaller, configurable limit.
    CONSTRAINT jobs_payload_size CHECK (octet_length(payload::text) <= 1048576)
);

-- The claim index holds claimable rows only, so it stays small however many
-- finished rows the table carries.
CREATE INDEX jobs_claimable_idx ON jobs (queue, priority, run_after, job_id)
    WHERE state IN ('QUEUED', 'RETRY_WAIT');

-- The sweeper's index: held leases by expiry.
CREATE INDEX jobs_lease_expiry_idx ON jobs (lease_expires_at)
    WHERE state IN ('RUNNING', 'CANCEL_REQUESTED');

-- Enqueue idempotency and schedule occurrences.
CREATE UNIQUE INDEX jobs_dedup_key_idx ON jobs (job_type, dedup_key)
    WHERE dedup_key IS NOT NULL;

-- The dead-letter view: FAILED rows grouped by type and error.
CREATE INDEX jobs_dead_letter_idx ON jobs (job_type, last_error_code, finished_at)
    WHERE state = 'FAILED';

-- Retention: finished rows by age, so they leave in batches.
CREATE INDEX jobs_finished_idx ON jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Finished jobs moved out of the hot table by the retention loop. Same columns,
-- no constraints beyond the key: rows arrive here already validated.
CREATE TABLE jobs_history (LIKE jobs INCLUDING DEFAULTS);
ALTER TABLE jobs_history ADD PRIMARY KEY (job_id);
ALTER TABLE jobs_history ADD COLUMN archived_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX jobs_history_finished_idx ON jobs_history (finished_at);

-- Operator actions (replays, bulk retries) are recorded here.
CREATE TABLE job_audit (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL,
    action      text NOT NULL CHECK (action <> ''),
    actor       text NOT NULL CHECK (actor <> ''),
    reason      text,
    details     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_audit_job_idx ON job_audit (job_id, created_at);

-- The transactional outbox (DESIGN.md §3). Rows of this shape written by any
-- service are relayed; a jobs row behind a message is not required.
CREATE TABLE job_outbox (
    id            bigserial PRIMARY KEY,
    topic         text NOT NULL CHECK (topic <> ''),
    message_key   text,
    payload       jsonb NOT NULL,
    headers       jsonb NOT NULL DEFAULT '{}'::jsonb,
    available_at  timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- Due, unpublished rows only: the relay's claim index.
CREATE INDEX job_outbox_due_idx ON job_outbox (available_at, id)
    WHERE published_at IS NULL;

-- The state machine, enforced by the database as well as the code: any state
-- change not in this list is rejected with a check_violation.
CREATE FUNCTION jobwire_check_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state, NEW.state) IN (
        ('QUEUED', 'RUNNING'),
        ('RETRY_WAIT', 'RUNNING'),
        ('RUNNING', 'SUCCEEDED'),
        ('RUNNING', 'RETRY_WAIT'),
        ('RUNNING', 'FAILED'),
        ('RUNNING', 'CANCEL_REQUESTED'),
        ('CANCEL_REQUESTED', 'CANCELLED'),
        -- a handler that finished its work before it saw the cancel request:
        -- the record says what really happened
        ('CANCEL_REQUESTED', 'SUCCEEDED'),
        ('QUEUED', 'CANCELLED'),
        ('RETRY_WAIT', 'CANCELLED'),
        ('FAILED', 'QUEUED')
    ) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'illegal job state transition % -> % for job %', OLD.state, NEW.state, OLD.job_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_legal_transition';
END;
$$;

CREATE TRIGGER jobs_legal_transition
    BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_check_transition();

-- Wake-ups. Every change that makes a job claimable writes its wake-up in the
-- same transaction: an outbox row for broker-dispatched queues, a NOTIFY on
-- channel `jobwire_jobs` (payload: the queue) for PostgreSQL-path queues.
-- Broker wake-ups carry available_at = run_after, so delayed jobs and retries
-- are published when they become due.
CREATE FUNCTION jobwire_wake_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT q.topic,
           n.job_id::text,
           jsonb_build_object('job_id', n.job_id, 'generation', n.lease_generation,
                              'queue', n.queue, 'job_type', n.job_type),
           jsonb_build_object('content-type', 'application/json', 'jobwire-kind', 'wake-up'),
           n.run_after
    FROM new_jobs n
    JOIN job_queues q ON q.queue = n.queue AND q.dispatch = 'broker'
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

CREATE TRIGGER jobs_wake_inserted
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobwire_wake_inserted();

CREATE FUNCTION jobwire_wake_reclaimable() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wake_topic text;
BEGIN
    SELECT q.topic INTO wake_topic
    FROM job_queues q WHERE q.queue = NEW.queue AND q.dispatch = 'broker';
    IF wake_topic IS NOT NULL THEN
        INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
        VALUES (wake_topic,
                NEW.job_id::text,
                jsonb_build_object('job_id', NEW.job_id, 'generation', NEW.lease_generation,
                                   'queue', NEW.queue, 'job_type', NEW.job_type),
                jsonb_build_object('content-type', 'application/json', 'jobwire-kind', 'wake-up'),
                NEW.run_after);
    ELSIF NEW.run_after <= now() THEN
        PERFORM pg_notify('jobwire_jobs', NEW.queue);
    END IF;
    RETURN NULL;
END;
$$;

-- Row-level, and only on a change into a claimable state (retry, sweep,
-- replay): heartbeats and completions never pay for it.
CREATE TRIGGER jobs_wake_reclaimable
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.state IN ('QUEUED', 'RETRY_WAIT') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_wake_reclaimable();
