-- jobwire schema, part 13: recurring schedules.
--
-- A schedule is a row; each of its occurrences becomes a job whose dedup key
-- is `schedule:<name>@<nominal UTC instant>`. Any number of schedulers take
-- due rows FOR UPDATE SKIP LOCKED, enqueue the occurrences and advance
-- next_run_at in one transaction, so no occurrence fires twice and no
-- scheduler is a leader. Column names are a contract (docs/schedules.md).
-- The table is prefixed like every jobwire table: applications share the
-- database, and a table called `schedules` is theirs to have.
CREATE TABLE job_schedules (
    name            text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    cron            text NOT NULL CHECK (cron <> ''),
    timezone        text NOT NULL CHECK (timezone <> ''),
    job_type        text NOT NULL CHECK (job_type <> ''),
    queue           text NOT NULL DEFAULT 'default' CHECK (queue <> ''),
    payload         jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority        smallint NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
    -- Each occurrence's run_after is its nominal instant plus a
    -- deterministic share of [0, jitter_seconds).
    jitter_seconds  integer NOT NULL DEFAULT 0 CHECK (jitter_seconds BETWEEN 0 AND 86400),
    -- What happens to occurrences missed while no scheduler ran.
    missed          text NOT NULL DEFAULT 'latest' CHECK (missed IN ('skip', 'latest', 'all')),
    -- Most missed occurrences `all` enqueues at once (the most recent ones).
    max_catch_up    integer NOT NULL DEFAULT 100 CHECK (max_catch_up BETWEEN 1 AND 10000),
    paused          boolean NOT NULL DEFAULT false,
    -- The next nominal instant (UTC) to fire; NULL when it never fires again.
    next_run_at     timestamptz,
    -- The nominal instant of the last occurrence fired, and when it was fired.
    last_fired_for  timestamptz,
    last_fired_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
-- The schedulers' index: what is due next.
CREATE INDEX job_schedules_due_idx ON job_schedules (next_run_at)
    WHERE NOT paused AND next_run_at IS NOT NULL;

-- Which schedule and which nominal instant created a job (NULL for jobs
-- enqueued otherwise). created_at - scheduled_for is the scheduler's delay.
ALTER TABLE jobs ADD COLUMN schedule_name text, ADD COLUMN scheduled_for timestamptz;
ALTER TABLE jobs_history ADD COLUMN schedule_name text, ADD COLUMN scheduled_for timestamptz;
