-- The outbox as the metrics collector reports it: rows waiting to be
-- published, how many of them are due, the age of the oldest due one, and
-- the rows moved aside to job_outbox_dead. Plain reads, no SKIP LOCKED: the
-- rows a stuck relay holds are exactly the ones this must not hide.
SELECT count(*) AS waiting,
       count(*) FILTER (WHERE available_at <= now()) AS due,
       coalesce(extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now())),
                0)::float8 AS oldest_due_age_s,
       (SELECT count(*) FROM job_outbox_dead) AS dead
FROM job_outbox
WHERE published_at IS NULL
