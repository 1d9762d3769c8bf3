-- Enqueue schedule occurrences: one job per (schedule, nominal instant),
-- for the schedule's tenant ($11, NULL for none),
-- with dedup key `schedule:<name>@<instant>`. An occurrence whose key is
-- already held writes nothing (ON CONFLICT): firing twice is refused by the
-- database. Wake-ups come from the jobs_wake_inserted trigger. Returns the
-- jobs written.
-- $10 is each occurrence's note, merged into its payload (`_schedule`, the
-- runs it stands for), or NULL. A payload that the note would take past
-- the payload ceiling (the jobwire_payload domain's 1 MiB) goes without it:
-- one refused row would fail the statement, and with it every schedule
-- fired in the same transaction, on every later try.
INSERT INTO jobs (job_id, queue, job_type, priority, payload, max_attempts, run_after,
                  dedup_key, schedule_name, scheduled_for, tenant)
SELECT jobwire_uuidv7(), queue, job_type, priority,
       CASE WHEN note IS NULL THEN payload
            WHEN octet_length((payload || note)::text) <= 1048576 THEN payload || note
            ELSE payload
       END,
       max_attempts, run_after, dedup_key, schedule_name, scheduled_for, tenant
FROM unnest($1::text[], $2::text[], $3::smallint[], $4::jsonb[], $5::integer[],
            $6::timestamptz[], $7::text[], $8::text[], $9::timestamptz[], $10::jsonb[],
            $11::text[])
    AS o(queue, job_type, priority, payload, max_attempts, run_after, dedup_key,
         schedule_name, scheduled_for, note, tenant)
ON CONFLICT (job_type, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
RETURNING job_id
