#!/usr/bin/env bash
# One capped round by hand, statement by statement: tenant A's backlog (N
# jobs, default 100,000) on queue `noisy` capped at CAP (default 48); pgbench
# runs ROUNDS rounds of a capped claim of up to 64 jobs and the worker's
# completion statement (crates/core/sql/finish_many.sql, every job
# succeeded) on one connection, and prints each statement's mean latency
# (from the client: with its commit and round trip).
# No worker and no handler: what the two statements of a capped round cost
# the database alone.
#
#   BIN=target/release/jobwire docs/bench/capped-round-by-hand.sh
#
# FINISH names another completion statement to time (an earlier version of
# finish_many.sql, with the BIN of that version: the schema must match).
#
# Drops and recreates database DB (default jobwire_capped_round) on the
# local PostgreSQL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_capped_round}
N=${N:-100000}
CAP=${CAP:-48}
ROUNDS=${ROUNDS:-600}
FINISH=${FINISH:-$here/../../crates/core/sql/finish_many.sql}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB "$BIN" migrate >/dev/null
DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB "$BIN" tenant set noisy --max-running "$CAP" >/dev/null
"${PSQL[@]}" -d "$DB" \
    -c "INSERT INTO jobs (job_id, queue, job_type, tenant)
        SELECT jobwire_uuidv7(), 'noisy', 'noop', 'A' FROM generate_series(1, $N)" \
    -c "VACUUM ANALYZE jobs" -c "CHECKPOINT"
script=$(mktemp)
trap 'rm -f "$script"' EXIT
{
    echo "SELECT coalesce(array_agg(job_id), '{}') AS ids,"
    echo "       coalesce(array_agg(lease_generation), '{}') AS gens, count(*) AS n"
    echo "FROM jobwire_claim_capped('noisy', 64, 'w', 30000, 0) \\gset"
    # The completion as the worker sends it, its parameters spelled out.
    grep -v '^ *--' "$FINISH" | sed \
        -e "s/\\\$1::uuid\\[\\]/:ids::uuid[]/" \
        -e "s/\\\$2::bigint\\[\\]/:gens::bigint[]/" \
        -e "s/\\\$3::text\\[\\]/array_fill('succeeded'::text, ARRAY[:n::int])/" \
        -e "s/\\\$4::bigint\\[\\]/array_fill(0::bigint, ARRAY[:n::int])/" \
        -e "s/\\\$5::text\\[\\]/array_fill(NULL::text, ARRAY[:n::int])/" \
        -e "s/\\\$6::text\\[\\]/array_fill(NULL::text, ARRAY[:n::int])/" \
        -e "s/\\\$7/'w'/"
    echo ";"
} >"$script"
# Prepared, as the worker's statements are: after five runs PostgreSQL
# keeps one plan instead of planning each time.
pgbench -h 127.0.0.1 -U postgres -n -r -M prepared -t "$ROUNDS" -f "$script" "$DB" 2>&1 |
    sed -n '/^tps/p; /statement latencies/,$p' | cut -c1-80
"${PSQL[@]}" -d "$DB" -c "SELECT state, count(*) FROM jobs GROUP BY 1 ORDER BY 1" \
    -c "SELECT count(*) AS slots_held FROM job_tenant_slots WHERE job_id IS NOT NULL"
