-- Take the advisory lock of one key shard for this session, if free.
SELECT pg_try_advisory_lock(1786082672, $1::int)
