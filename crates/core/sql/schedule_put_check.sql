-- What putting a schedule needs from the database, in one round trip: the
-- payload's size as every enqueue path measures it (its jsonb text form),
-- the payload limit in force, and the database clock.
SELECT octet_length($1::jsonb::text) AS size,
       (SELECT coalesce(max(max_payload_bytes), 1048576) FROM job_settings) AS max_bytes,
       now() AS db_now
