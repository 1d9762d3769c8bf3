-- Enqueue schedule occurrences: one job per (schedule, nominal instant),
-- with dedup key `schedule:<name>@<instant>`. An occurrence whose key is
-- already held writes nothing (ON CONFLICT): firing twice is refused by the
-- database. Wake-ups come from the jobs_wake_inserted trigger. Returns the
-- jobs written.
INSERT INTO jobs (job_id, queue, job_type, priority, payload, max_attempts, run_after,
                  dedup_key, schedule_name, scheduled_for)
SELECT jobwire_uuidv7(), queue, job_type, priority, payload, max_attempts, run_after,
       dedup_key, schedule_name, scheduled_for
FROM unnest($1::text[], $2::text[], $3::smallint[], $4::jsonb[], $5::integer[],
            $6::timestamptz[], $7::text[], $8::text[], $9::timestamptz[])
    AS o(queue, job_type, priority, payload, max_attempts, run_after, dedup_key,
         schedule_name, scheduled_for)
ON CONFLICT (job_type, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
RETURNING job_id
