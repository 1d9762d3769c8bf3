-- jobwire schema: the capped claim is planned at each call, for the jobs
-- there are then.
--
-- It was planned once per session (plan_cache_mode = force_generic_plan,
-- migration 20261201000009): cheaper than planning every call, as long as
-- the plan fits the table. But a plan made while the queue was empty (a
-- worker that started on a quiet database: its first claims plan the
-- statement) expects a table of one row, and keeps expecting it: when a
-- tenant's backlog of 100,000 jobs then arrived, each claim scanned the
-- whole backlog, several times, and joined its few claimed jobs to every
-- row of jobs (about a second a claim). A capped queue drained at a
-- quarter of its speed and its quiet tenants waited 0.6 s at p95, until a
-- new plan (an ANALYZE of jobs: never, with autovacuum off). Planned at
-- each call, the claim sees the table as it is (docs/benchmarks.md, "A
-- capped claim planned while its queue was empty").
--
-- Altering a function's settings takes no lock on any table.

ALTER FUNCTION jobwire_claim_capped(text, integer, text, bigint, bigint)
    SET plan_cache_mode = force_custom_plan;
