-- jobwire schema: the row triggers on an update of `jobs` run after the write.
--
-- While a table has any BEFORE UPDATE row trigger, PostgreSQL locks every
-- row an UPDATE changes before it writes the new version (the trigger must
-- see a version no one can change under it), whatever the trigger's column
-- list and WHEN clause say, even when the trigger is disabled. That lock is
-- a WAL record of its own (Heap/LOCK, 54 bytes) for each job a completion
-- finishes and each heartbeat; the claim's rows are already locked by its
-- FOR UPDATE, so it paid only the second visit (docs/benchmarks.md, "The
-- row triggers run after the write").
--
-- Both BEFORE triggers become AFTER row triggers, which lock nothing:
-- - jobs_legal_transition refuses an illegal change when the statement
--   ends, before it returns: the statement fails and nothing is written,
--   with the same SQLSTATE (23514) and constraint name as before. A state
--   no job can have is now refused by the CHECK `jobs_state_valid` first.
--   Its list of legal changes moves into its WHEN clause (below).
-- - jobs_release_tenant_slot can no longer clear the slot in the row being
--   written. It hands the slot back first (while the job still holds it,
--   so a hand-over cannot pick this job), then clears the job's slot with
--   an update of its own. Only a job that left RUNNING still holding a
--   slot pays that update: a completion on a broker queue, a sweep, a
--   cancel, a hand edit. A PostgreSQL-path completion clears and frees its
--   slots in its own statement (sql/finish_many.sql), as before.

DROP TRIGGER jobs_legal_transition ON jobs;

-- The legal changes are listed in the trigger's WHEN clause, an expression
-- PostgreSQL evaluates as it writes the row, so a legal change (every claim
-- and completion) queues no trigger event and calls no function; only an
-- illegal one fires the function, which refuses it.
CREATE OR REPLACE FUNCTION jobwire_check_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'illegal job state transition % -> % for job %', OLD.state, NEW.state, OLD.job_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_legal_transition';
END;
$$;

CREATE TRIGGER jobs_legal_transition
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          AND (OLD.state, NEW.state) NOT IN (
              ('QUEUED', 'RUNNING'),
              ('RETRY_WAIT', 'RUNNING'),
              ('RUNNING', 'SUCCEEDED'),
              ('RUNNING', 'RETRY_WAIT'),
              ('RUNNING', 'FAILED'),
              ('RUNNING', 'CANCEL_REQUESTED'),
              ('CANCEL_REQUESTED', 'CANCELLED'),
              -- a handler that finished its work before it saw the cancel
              -- request: the record says what really happened
              ('CANCEL_REQUESTED', 'SUCCEEDED'),
              ('QUEUED', 'CANCELLED'),
              ('RETRY_WAIT', 'CANCELLED'),
              ('FAILED', 'QUEUED')))
    EXECUTE FUNCTION jobwire_check_transition();

DROP TRIGGER jobs_release_tenant_slot ON jobs;

CREATE OR REPLACE FUNCTION jobwire_release_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobwire_give_back_tenant_slot(OLD.queue, OLD.tenant, OLD.tenant_slot, OLD.job_id);
    -- Only the column list `state` fires the triggers above, so this update
    -- fires none of them.
    UPDATE jobs SET tenant_slot = NULL
    WHERE job_id = NEW.job_id AND tenant_slot = OLD.tenant_slot;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_release_tenant_slot
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant_slot IS NOT NULL AND NEW.tenant_slot IS NOT NULL
          AND NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'RETRY_WAIT')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_release_tenant_slot();
