-- jobwire schema: the wake-up claim of capped tenants' jobs and the
-- tenant hand-outs are planned at each call, for the jobs there are then.
--
-- As the capped claim (migration 20261207000002): a function's statements
-- are planned anew for their first five runs, then PostgreSQL may keep one
-- generic plan for good. Made while `jobs` was empty (a worker started on a
-- quiet database, a reconciler pass over an idle queue), that plan expects
-- one row: after a burst, each statement reads every job, and a lookup by
-- id becomes a scan with a filter (docs/benchmarks.md, "Statements planned
-- on an empty table"). A plan per call costs a little each time and never
-- that.
--
-- Altering a function's settings takes no lock on any table.

ALTER FUNCTION jobwire_claim_ids_capped(uuid[], text, bigint, text[])
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION jobwire_hand_out_free_slots(text[], text[], text)
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION jobwire_hand_out_to_waiting_tenants(text[], text)
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION jobwire_hand_over_slot(text, text, integer, text, text)
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION jobwire_release_tenant_slot()
    SET plan_cache_mode = force_custom_plan;
