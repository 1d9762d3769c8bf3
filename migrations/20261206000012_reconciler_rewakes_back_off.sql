-- jobwire schema: the reconciler re-wakes a job it has re-woken before
-- later each time.
--
-- The reconciler gives a fresh wake-up to a due job of a broker queue that
-- has seen no change for the grace period (60 s by default): its wake-up
-- was lost. It cannot tell a lost wake-up from one that waits in the broker
-- (behind a backlog, or on a queue with no consumer at all), and it
-- re-woke such a job every grace period: a broker queue left without a
-- consumer overnight gained one message per waiting job per minute.
--
-- Now a job whose last change was the reconciler's own re-wake waits as
-- long as it had been due at that re-wake (at least the grace, at most 16
-- graces) before the next one (crates/core/sql/reconcile_wake_ups.sql).
-- `rewoken_at` is when the reconciler last re-woke the job; it is that
-- re-wake's `updated_at`, so any later change of the row (a claim, a retry,
-- a slot handed over) ends the back-off and the next re-wake comes one
-- grace after that change, as before; so does a later change of the
-- job's queue (a resume, a move, new limits: `job_queues.updated_at`).
-- Nothing else writes it; jobs_history does not keep it.
--
-- Adding a nullable column without a default changes only the catalog. It
-- needs the table's lock for a moment, and waits at most 10 s for it.
SET LOCAL lock_timeout = '10s';

ALTER TABLE jobs ADD COLUMN rewoken_at timestamptz;
