-- The wake-up claim of 48 jobs handed a slot, timed in psql
-- (docs/benchmarks.md, "The wake-up claim takes the handed jobs in one
-- statement"). On a freshly migrated database:
--   psql -f wake-up-claim-handed.sql        (setup, once)
-- then, in one session, the round below 15 times (\i it, or concatenate):
-- each round claims the 48 jobs holding a slot, finishes them (which hands
-- the 48 slots to the next 48 jobs) and empties the outbox. \timing shows
-- the claim alone.

-- Setup: a broker queue capping every tenant at 48, and 20,000 waiting
-- jobs of one tenant (the enqueue's commit hands out the first 48 slots).
INSERT INTO job_queues (queue, dispatch, topic, tenant_max_running, tenant_capped)
VALUES ('q', 'broker', 't', 48, true);
SELECT count(*) FROM (SELECT jobwire_enqueue('noop', '{}', 'q', tenant => 'a')
                      FROM generate_series(1, 20000)) s;

-- One round:
-- \set QUIET on
-- SELECT array_agg(job_id) AS ids FROM jobs WHERE tenant_slot IS NOT NULL AND state = 'QUEUED' \gset
-- \timing on
-- SELECT count(*) FROM jobwire_claim_ids_capped(:'ids'::uuid[], 'w', 30000, '{q}');
-- \timing off
-- SELECT array_agg(job_id) AS done, array_agg(lease_generation) AS gens,
--        array_agg('succeeded'::text) AS outs, array_agg(0::bigint) AS d,
--        array_agg(NULL::text) AS e
-- FROM jobs WHERE state = 'RUNNING' \gset
-- SELECT count(*) FROM jobwire_finish_many(:'done'::uuid[], :'gens'::bigint[], :'outs'::text[],
--                                          :'d'::bigint[], :'e'::text[], :'e'::text[], 'w');
-- DELETE FROM job_outbox;
