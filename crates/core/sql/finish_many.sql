-- Record the outcome of many attempts in one statement, each fenced by
-- (job_id, lease_owner, lease_generation): the statement, and what each
-- outcome does, is jobwire_finish_many (migration
-- 20261207000005_the_completion_is_planned_for_the_table_it_finds). A row
-- missing from the result lost its lease (swept, reclaimed, or already
-- finished): the caller reports Fenced.
-- $1 job ids, $2 generations, $3 outcomes, $4 retry delays (ms), $5 error codes,
-- $6 error messages, $7 lease owner.
SELECT job_id, lease_generation, state, run_after, cancel_latency_s
FROM jobwire_finish_many($1::uuid[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7)
