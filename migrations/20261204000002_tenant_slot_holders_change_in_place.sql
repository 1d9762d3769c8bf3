-- jobwire schema: a tenant slot changes holder without an index write.
--
-- A capped claim writes each slot row it takes (job_id := the job) and the
-- completion writes it back (job_id := NULL): two row versions per job run
-- under a cap. job_id was indexed (job_tenant_slots_job_idx, unique where
-- set), so neither write could be a heap-only (HOT) update: each one added
-- an entry to that index and to the primary key, three entries per job,
-- and the primary key of a table of a few hundred rows grew with every job
-- until vacuum came by (docs/benchmarks.md, "A tenant slot changes holder
-- in place").
--
-- The one statement that looked a slot up by its holder was the
-- completion (sql/finish_many.sql). It now reads the slot from the job's
-- row (jobs.tenant_slot, which names the slot for as long as the job holds
-- it) and finds the slot row by its key. With job_id in no index, a change
-- of holder changes no indexed column, and PostgreSQL writes the new
-- version into the same page with no index entry whenever the page has
-- room: fillfactor 50 leaves that room in the pages of new slot rows.
--
-- The unique index also said that no job holds two slots. What keeps that
-- true is unchanged: every statement that hands out a slot holds the job's
-- row lock and requires its jobs.tenant_slot to be NULL, which READ
-- COMMITTED re-reads after waiting for the lock (migration
-- 20261201000009).

DROP INDEX job_tenant_slots_job_idx;
ALTER TABLE job_tenant_slots SET (fillfactor = 50);
