-- jobwire schema: a completion frees its tenant slots as one set.
--
-- A job leaving RUNNING gave its slot back through two row triggers: one
-- before the row was written (forget the slot in the row) and one after
-- (free the slot row, or hand it over on a broker queue, and wake the
-- queue). A completion of 48 capped jobs spent 1.2-1.6 ms of its 2.3-2.9
-- ms in them (docs/benchmarks.md, "A completion frees its tenant slots as
-- one set"). Now the completion statement (sql/finish_many.sql) clears the
-- slot of each PostgreSQL-path job it finishes, frees those slot rows in
-- one UPDATE and notifies once; the trigger fires only for a row whose
-- statement left its slot set: a completion on a broker queue (each slot
-- is handed over to one waiting job with its own wake-up), a sweep, a
-- cancel, a hand edit.
--
-- Also: the two helpers every capped claim calls, a tenant's cap and its
-- slot rows, are PL/pgSQL now. As SQL functions they could not be inlined
-- (a sub-select; an INSERT), and PostgreSQL plans a SQL function's
-- statements anew in every statement that calls it; PL/pgSQL keeps its
-- plans for the session.
--
-- The one trigger left runs before the row is written: it frees (or hands
-- over) the slot and clears it in the same row write, as the two did
-- together. A hand-over still picks the tenant's next due job holding no
-- slot; it cannot pick the row being written, which is still running.

-- Give a job's slot back: on a broker queue hand it to the tenant's next
-- due job that holds none, with its wake-up (reason `slot`); otherwise free
-- it and notify the PostgreSQL-path queue (with the wake token). What the
-- AFTER trigger's function did, now shared by the row trigger below and
-- the trigger on a deleted row.
CREATE FUNCTION jobwire_give_back_tenant_slot(p_queue text, p_tenant text, p_slot integer,
                                              p_job_id uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    wake_topic text;
BEGIN
    SELECT q.topic INTO wake_topic
    FROM job_queues q WHERE q.queue = p_queue AND q.dispatch = 'broker';
    IF wake_topic IS NOT NULL
       AND p_slot <= coalesce(jobwire_tenant_cap(p_queue, p_tenant), 0)
       AND jobwire_hand_over_slot(p_queue, p_tenant, p_slot, wake_topic, 'slot') THEN
        RETURN;
    END IF;
    UPDATE job_tenant_slots SET job_id = NULL
    WHERE queue = p_queue AND tenant = p_tenant AND slot = p_slot AND job_id = p_job_id;
    IF wake_topic IS NULL AND jobwire_wake_token('jobwire_jobs', p_queue) THEN
        PERFORM pg_notify('jobwire_jobs', p_queue);
    END IF;
END;
$$;

CREATE FUNCTION jobwire_release_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant_slot := NULL;
    PERFORM jobwire_give_back_tenant_slot(OLD.queue, OLD.tenant, OLD.tenant_slot, OLD.job_id);
    RETURN NEW;
END;
$$;

-- A job row deleted while it holds a slot (jobs_free_tenant_slot_on_delete).
CREATE OR REPLACE FUNCTION jobwire_free_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobwire_give_back_tenant_slot(OLD.queue, OLD.tenant, OLD.tenant_slot, OLD.job_id);
    RETURN NULL;
END;
$$;

DROP TRIGGER jobs_forget_tenant_slot ON jobs;
DROP TRIGGER jobs_free_tenant_slot ON jobs;
DROP FUNCTION jobwire_forget_tenant_slot();

-- `NEW.tenant_slot IS NOT NULL`: a statement that cleared the slot itself
-- has freed it itself (the completion); every other way out of RUNNING
-- leaves it to this trigger, and so must a hand edit.
CREATE TRIGGER jobs_release_tenant_slot
    BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant_slot IS NOT NULL AND NEW.tenant_slot IS NOT NULL
          AND NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'RETRY_WAIT')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobwire_release_tenant_slot();

CREATE OR REPLACE FUNCTION jobwire_tenant_cap(p_queue text, p_tenant text) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(
        (SELECT t.max_running FROM job_tenants t WHERE t.queue = p_queue AND t.tenant = p_tenant),
        (SELECT q.tenant_max_running FROM job_queues q WHERE q.queue = p_queue));
END;
$$;

CREATE OR REPLACE FUNCTION jobwire_ensure_tenant_slots(p_queue text, p_tenant text, p_cap integer)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job_tenant_slots x
                   WHERE x.queue = p_queue AND x.tenant = p_tenant AND x.slot = p_cap) THEN
        INSERT INTO job_tenant_slots (queue, tenant, slot)
        SELECT p_queue, p_tenant, s FROM generate_series(1, p_cap) s
        ON CONFLICT DO NOTHING;
    END IF;
END;
$$;
