-- jobwire schema, part 14: jobwire_reject_payload is called only for an
-- oversized payload (it raises), but the planner charges every row of an
-- enqueue for it at the default cost of 100. On a batch of a thousand rows
-- that pushed the estimate past jit_above_cost, and JIT compilation made the
-- enqueue statement ten times slower. Its true cost, for planning, is nil.
ALTER FUNCTION jobwire_reject_payload(integer, integer) COST 1;
