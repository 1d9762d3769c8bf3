-- Count a failed attempt on each row, keep its error, and hold it back for
-- its retry delay (0 in per-key ordering mode, where the relay pauses
-- instead, so the rows behind it in its key cannot overtake it).
UPDATE job_outbox o
SET attempts = o.attempts + 1,
    last_error = f.error,
    available_at = greatest(o.available_at, now() + f.delay_ms * interval '1 millisecond')
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(id, error, delay_ms)
WHERE o.id = f.id
