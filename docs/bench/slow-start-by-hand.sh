#!/usr/bin/env bash
# A worker starting among slow jobs: 400 jobs of 3 s each (the built-in
# `sleep` handler) on queue `w`, one `jobwire worker` with 64 slots. Prints
# how many jobs are RUNNING every 100 ms for 1.5 s. 64 is the slots alone;
# more is jobs claimed ahead, which wait for a slot and are given back
# after a second.
#
#   DB=slowx BIN=target/release/jobwire docs/bench/slow-start-by-hand.sh
#
# Drops and recreates database DB (default jobwire_slow_start) on the local
# PostgreSQL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_slow_start}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
BIN=$BIN JOB_TYPE=sleep PAYLOAD='{"ms": 3000}' "$here/backlog.sh" "$DB" 400
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" worker --queue w=64 --no-retention --no-scheduler --no-reconciler >/dev/null 2>&1 &
worker=$!
running=()
for _ in $(seq 15); do
    sleep 0.1
    running+=("$("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM jobs WHERE state = 'RUNNING'")")
done
kill -INT "$worker"
wait "$worker" || true
echo "RUNNING every 100 ms: ${running[*]}"
