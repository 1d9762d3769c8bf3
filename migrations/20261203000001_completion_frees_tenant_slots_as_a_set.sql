-- jobwire schema: a completion frees its tenant slots as one set.
--
-- A job leaving RUNNING gave its slot back through two row triggers: one
-- before the row was written (forget the slot in the row) and one after
-- (free the slot row, or hand it over on a broker queue, and wake the
-- queue). A completion of 48 capped jobs paid about 2 ms of its 3.5 ms
-- for them (docs/benchmarks.md, "A completion frees its tenant slots as
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

CREATE FUNCTION jobwire_release_tenant_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wake_topic text;
BEGIN
    NEW.tenant_slot := NULL;
    SELECT q.topic INTO wake_topic
    FROM job_queues q WHERE q.queue = OLD.queue AND q.dispatch = 'broker';
    IF wake_topic IS NOT NULL
       AND OLD.tenant_slot <= coalesce(jobwire_tenant_cap(OLD.queue, OLD.tenant), 0)
       AND jobwire_hand_over_slot(OLD.queue, OLD.tenant, OLD.tenant_slot, wake_topic, 'slot') THEN
        RETURN NEW;
    END IF;
    UPDATE job_tenant_slots SET job_id = NULL
    WHERE queue = OLD.queue AND tenant = OLD.tenant AND slot = OLD.tenant_slot
      AND job_id = OLD.job_id;
    IF wake_topic IS NULL AND jobwire_wake_token('jobwire_jobs', OLD.queue) THEN
        PERFORM pg_notify('jobwire_jobs', OLD.queue);
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER jobs_forget_tenant_slot ON jobs;
DROP TRIGGER jobs_free_tenant_slot ON jobs;
DROP FUNCTION jobwire_forget_tenant_slot();

-- `NEW.tenant_slot IS NOT NULL`: a statement that cleared the slot itself
-- has freed it itself (the completion); every other way out of RUNNING
-- leaves it to this trigger, and so must a hand edit. jobs_free_tenant_slot_on_delete (a row
-- deleted by hand) is unchanged.
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
