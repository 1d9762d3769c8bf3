-- The broker queues, other than those named in $2, whose topic is one of
-- $1: a worker serving only $2 takes their wake-ups off the topic and
-- cannot claim them.
SELECT queue, topic
FROM job_queues
WHERE dispatch = 'broker'
  AND topic = ANY($1::text[])
  AND queue <> ALL($2::text[])
ORDER BY topic, queue
