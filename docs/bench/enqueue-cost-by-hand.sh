#!/usr/bin/env bash
# Where the single-job enqueue's time goes: pgbench with 8 clients for
# RUN_SECONDS (default 5) each, ROUNDS times (default 2), of transactions that
#   business   insert a business row (the bench's bench_orders) alone;
#   narrow     insert it and a row into a table of four columns and a key;
#   job, bare  insert it and a job, with the jobs table's triggers off;
#   job        insert it and a job as the library's single-job enqueue
#              sends it (crates/core/sql/enqueue_one.sql), triggers on;
#   job, no enqueue trigger / job, no commit trigger
#              the same with one of the two triggers an insert fires off:
#              the statement trigger (jobs_wake_inserted: broker wake-ups,
#              enqueue limits, tenant slots) or the wake-up decided at
#              commit (jobs_wake_at_commit).
# No worker runs: what the producers' transactions cost alone. Prints each
# variant's transactions per second. The job's queue `e2e` is a
# PostgreSQL-path queue; another queue, on a broker, is configured too, as
# in a deployment that uses both.
#
#   BIN=target/release/jobwire docs/bench/enqueue-cost-by-hand.sh
#
# Drops and recreates database DB (default jobwire_enqueue_cost) on the
# local PostgreSQL; its triggers are switched off and on again.
set -euo pipefail
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_enqueue_cost}
RUN_SECONDS=${RUN_SECONDS:-5}
ROUNDS=${ROUNDS:-2}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
BIN="$BIN" "$(dirname "$0")/producer-db.sh" "$DB"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
order="INSERT INTO bench_orders (id) VALUES (gen_random_uuid());"
printf 'BEGIN;\n%s\nCOMMIT;\n' "$order" >"$dir/business.sql"
printf 'BEGIN;\n%s\n%s\nCOMMIT;\n' "$order" \
    "INSERT INTO narrow VALUES (jobwire_uuidv7(), 'e2e', 'noop', '{\"n\":1}'::jsonb);" >"$dir/narrow.sql"
{
    printf 'BEGIN;\n%s\n' "$order"
    # The single-job enqueue with its parameters spelled out.
    grep -v '^ *--' "$(dirname "$0")/../../crates/core/sql/enqueue_one.sql" | sed \
        -e "s/\\\$10/NULL::text/; s/\\\$11/NULL::text/" \
        -e "s/\\\$1,/jobwire_uuidv7(),/; s/\\\$2,/'e2e',/; s/\\\$3,/'noop',/; s/\\\$4,/0::smallint,/" \
        -e "s/\\\$5::text/'{\"n\":1}'::text/g; s/\\\$5,/'{\"n\":1}'::jsonb,/; s/\\\$6,/3,/" \
        -e "s/\\\$7,/NULL::timestamptz,/; s/\\\$8,/NULL::bigint,/; s/\\\$9,/NULL::text,/"
    printf ';\nCOMMIT;\n'
} >"$dir/job.sql"
run() {
    "${PSQL[@]}" -d "$DB" -c "TRUNCATE bench_orders, narrow" -c "DELETE FROM jobs" \
        -c "VACUUM jobs" -c "CHECKPOINT" >/dev/null
    pgbench -h 127.0.0.1 -U postgres -n -c 8 -j 2 -T "$RUN_SECONDS" -M prepared -f "$1" "$DB" 2>&1 |
        sed -n 's/^tps = \([0-9]*\).*/\1/p'
}
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round: business $(run "$dir/business.sql") tx/s"
    echo "round $round: narrow $(run "$dir/narrow.sql") tx/s"
    "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs DISABLE TRIGGER USER"
    echo "round $round: job, bare $(run "$dir/job.sql") tx/s"
    "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs ENABLE TRIGGER USER"
    echo "round $round: job $(run "$dir/job.sql") tx/s"
    for trigger in jobs_wake_inserted jobs_wake_at_commit; do
        "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs DISABLE TRIGGER $trigger"
        echo "round $round: job without $trigger $(run "$dir/job.sql") tx/s"
        "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs ENABLE TRIGGER $trigger"
    done
done
