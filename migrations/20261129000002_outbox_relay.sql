-- jobwire schema, part 2: what the outbox relay needs.

-- Rows that could not be published after bounded attempts (too large for the
-- broker, an invalid destination): moved here with their last error so they
-- never block the rows behind them. Same shape as job_outbox, keyed by the
-- original id.
CREATE TABLE job_outbox_dead (
    id            bigint PRIMARY KEY,
    topic         text NOT NULL,
    message_key   text,
    payload       jsonb NOT NULL,
    headers       jsonb NOT NULL,
    available_at  timestamptz NOT NULL,
    attempts      integer NOT NULL,
    last_error    text,
    created_at    timestamptz NOT NULL,
    failed_at     timestamptz NOT NULL DEFAULT now()
);

-- Wake relays when rows arrive: one NOTIFY per inserting statement (and
-- PostgreSQL folds repeats within a transaction). A lost notification costs
-- at most the relay's poll interval.
CREATE FUNCTION jobwire_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobwire_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_outbox_notify
    AFTER INSERT ON job_outbox
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobwire_outbox_notify();
