-- Take up to $1 due, unpublished rows, oldest due first, skipping rows other
-- relays hold. The caller keeps the transaction open while it publishes, so
-- the row locks are what lets several relays drain one table.
SELECT id, topic, message_key, payload::text AS payload, headers, attempts
FROM job_outbox
WHERE published_at IS NULL
  AND available_at <= now()
ORDER BY available_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED
