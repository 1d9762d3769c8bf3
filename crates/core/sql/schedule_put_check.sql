-- What putting a schedule needs from the database, in one round trip: the
-- payload's size as every enqueue path measures it (its jsonb text form),
-- the payload limit in force, and the database clock as this statement
-- runs (after the schedule's lock, lock_schedule.sql: a new cron restarts
-- after anything a scheduler fired before the put).
SELECT octet_length($1::jsonb::text) AS size,
       (SELECT coalesce(max(max_payload_bytes), 1048576) FROM job_settings) AS max_bytes,
       clock_timestamp() AS db_now
