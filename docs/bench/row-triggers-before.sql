-- Puts back the two BEFORE UPDATE row triggers on `jobs` as they were before
-- migration 20261203000005 (from migrations 20261129000001 and
-- 20261203000001), on a database migrated by a build that has it: the
-- "before" side of docs/benchmarks.md, "The row triggers run after the
-- write". Never run this on a database you keep.
BEGIN;
DROP TRIGGER jobs_legal_transition ON jobs;
CREATE OR REPLACE FUNCTION jobwire_check_transition() RETURNS trigger
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

DROP TRIGGER jobs_release_tenant_slot ON jobs;
CREATE OR REPLACE FUNCTION jobwire_release_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant_slot := NULL;
    PERFORM jobwire_give_back_tenant_slot(OLD.queue, OLD.tenant, OLD.tenant_slot, OLD.job_id);
    RETURN NEW;
END;
$$;
CREATE TRIGGER jobs_release_tenant_slot
    BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant_slot IS NOT NULL AND NEW.tenant_slot IS NOT NULL
          AND NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'RETRY_WAIT')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_release_tenant_slot();
COMMIT;
