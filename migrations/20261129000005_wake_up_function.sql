-- jobwire schema, part 5: one definition of a job's wake-up message.
--
-- A wake-up (an outbox row that tells a broker consumer "job X may be
-- claimable") was built in three places: both wake-up triggers and the
-- reconciler's statement. jobwire_wake_up builds its body and its headers
-- in one place; the headers carry the job id and generation, so the relay
-- passes them through without reading the body (it needs no jobs row).

CREATE FUNCTION jobwire_wake_up(
    job_id uuid,
    generation bigint,
    queue text,
    job_type text,
    reason text DEFAULT NULL,
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
               'jobwire-reason', reason))
$$;

CREATE OR REPLACE FUNCTION jobwire_wake_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT q.topic, n.job_id::text, w.payload, w.headers, n.run_after
    FROM new_jobs n
    JOIN job_queues q ON q.queue = n.queue AND q.dispatch = 'broker'
    CROSS JOIN LATERAL jobwire_wake_up(n.job_id, n.lease_generation, n.queue, n.job_type) w
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
        FROM jobwire_wake_up(NEW.job_id, NEW.lease_generation, NEW.queue, NEW.job_type) w;
    ELSIF NEW.run_after <= now() THEN
        PERFORM pg_notify('jobwire_jobs', NEW.queue);
    END IF;
    RETURN NULL;
END;
$$;
