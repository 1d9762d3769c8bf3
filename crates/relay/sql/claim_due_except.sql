-- The lane beside dedicated ones: take up to $1 due rows of every topic but
-- those in $2, oldest due first, skipping rows other relays hold.
SELECT id, topic, message_key, payload::text AS payload, headers, attempts
FROM job_outbox
WHERE published_at IS NULL
  AND available_at <= now()
  AND topic <> ALL($2::text[])
ORDER BY available_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED
