-- Declare how a queue is dispatched: 'postgres' (SKIP LOCKED workers, NOTIFY)
-- or 'broker' (wake-ups through job_outbox on `topic`).
--
-- Declaring the PostgreSQL path (anew or again) gives back the tenant slots
-- a broker hand-over left with the queue's waiting jobs, which the
-- PostgreSQL path's claim never takes (migration 20261206000003). A
-- hand-over by a statement running beside this one can still land after
-- it: the reconciler's next pass gives that slot back too.
WITH declared AS (
    INSERT INTO job_queues (queue, dispatch, topic)
    VALUES ($1, $2, $3)
    ON CONFLICT (queue) DO UPDATE
    SET dispatch = excluded.dispatch, topic = excluded.topic, updated_at = now()
    RETURNING queue, dispatch
)
SELECT jobwire_release_handed_slots(ARRAY[d.queue])
FROM declared d
WHERE d.dispatch = 'postgres'
