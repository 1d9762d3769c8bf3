-- Move rows that can never be published into job_outbox_dead with their
-- final error and attempt count.
WITH failed AS (
    SELECT * FROM unnest($1::bigint[], $2::text[]) AS f(id, error)
),
moved AS (
    DELETE FROM job_outbox o
    USING failed f
    WHERE o.id = f.id
    RETURNING o.id, o.topic, o.message_key, o.payload, o.headers, o.available_at,
              o.attempts, o.created_at, f.error
)
INSERT INTO job_outbox_dead (id, topic, message_key, payload, headers, available_at,
                             attempts, last_error, created_at)
SELECT id, topic, message_key, payload, headers, available_at, attempts + 1, error, created_at
FROM moved
ON CONFLICT (id) DO NOTHING
