-- jobwire schema: wake-ups decided at commit, at most one notifying commit
-- at a time per queue.
--
-- Until now every transaction that enqueued a runnable PostgreSQL-path job
-- (or wrote an outbox row) sent a NOTIFY. PostgreSQL serialises notifying
-- commits: a transaction with pending notifications takes a database-wide
-- lock before its commit record and holds it until the commit is flushed,
-- so eight producers that each notify commit one after another instead of
-- sharing a WAL flush (docs/benchmarks.md, "Wake-ups at commit").
--
-- Now:
-- * the decision is taken at commit, by a deferred constraint trigger, so
--   it covers only the commit itself however long the business transaction
--   ran;
-- * a committing transaction notifies only if it takes its queue's wake
--   token, a transaction-level advisory lock. One that finds the token held
--   skips its NOTIFY: the holder is committing at the same moment, and its
--   notification wakes the same workers, which poll again 1, 2, 4 ... ms
--   after finding work (jobwire-loop's IdlePoll) and so find the skipped
--   commit's job too;
-- * a lost or skipped notification costs at most the poll interval, as
--   before (the worker's and the relay's poll fallback is unchanged).
--
-- The token is `pg_try_advisory_xact_lock(hashtext('jobwire.' || channel),
-- hashtext(subject))`. An application's own two-key advisory lock on the
-- same pair would suppress that queue's notifications while it is held (its
-- jobs then start within the poll interval); a session that runs `SET
-- CONSTRAINTS ALL IMMEDIATE` before enqueuing holds the token from the
-- enqueue to its commit, delaying other producers' wake-ups in the same way.

CREATE FUNCTION jobwire_wake_token(channel text, subject text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT pg_try_advisory_xact_lock(hashtext('jobwire.' || channel), hashtext(subject))
$$;

-- The enqueue trigger keeps writing broker queues' wake-ups to the outbox
-- (in the enqueuing statement, as before) and no longer notifies.
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
    RETURN NULL;
END;
$$;

-- At commit, once per queue and transaction (a batch fires it per row; the
-- transaction-local setting remembers the queue last decided), for a job
-- that is runnable now on a PostgreSQL-path queue.
CREATE FUNCTION jobwire_wake_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_after > now()
       OR current_setting('jobwire.woken_queue', true) IS NOT DISTINCT FROM NEW.queue THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('jobwire.woken_queue', NEW.queue, true);
    IF NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = NEW.queue AND q.dispatch = 'broker')
       AND jobwire_wake_token('jobwire_jobs', NEW.queue) THEN
        PERFORM pg_notify('jobwire_jobs', NEW.queue);
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER jobs_wake_at_commit
    AFTER INSERT ON jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.state IN ('QUEUED', 'RETRY_WAIT'))
    EXECUTE FUNCTION jobwire_wake_at_commit();

-- A job made runnable again (a retry, a replay, a swept lease) takes the
-- token too; these statements are short, so the trigger stays immediate.
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
    ELSIF NEW.run_after <= now() AND jobwire_wake_token('jobwire_jobs', NEW.queue) THEN
        PERFORM pg_notify('jobwire_jobs', NEW.queue);
    END IF;
    RETURN NULL;
END;
$$;

-- The relay's wake-up: the same token, one per outbox (relays of every lane
-- listen on one channel and each checks its own lane), at commit. Rows due
-- later notify too: a woken relay sleeps until its next row is due.
DROP TRIGGER job_outbox_notify ON job_outbox;
DROP FUNCTION jobwire_outbox_notify();

CREATE FUNCTION jobwire_outbox_wake_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('jobwire.woken_outbox', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('jobwire.woken_outbox', 'on', true);
    IF jobwire_wake_token('jobwire_outbox', '') THEN
        PERFORM pg_notify('jobwire_outbox', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER job_outbox_wake_at_commit
    AFTER INSERT ON job_outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    EXECUTE FUNCTION jobwire_outbox_wake_at_commit();
