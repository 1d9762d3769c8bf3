#!/usr/bin/env bash
# The start of a drain: N no-op jobs (default 20,000) on queue `w`, one
# `jobwire worker` with 64 slots. Prints the time from the worker's launch
# to its first claim, the drain's jobs/s from the first claim to the last
# completion and from the launch, and the first 30 claims (ms after the
# first one : jobs), which show how fast the local queue grows.
#
#   DB=startx BIN=target/release/jobwire docs/bench/drain-start-by-hand.sh
#
# Drops and recreates database DB (default jobwire_drain_start) on the local
# PostgreSQL; run nothing else on the machine beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_drain_start}
N=${N:-20000}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
BIN=$BIN "$here/backlog.sh" "$DB" "$N"
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
launched=$("${PSQL[@]}" -d "$DB" -tAc "SELECT extract(epoch FROM clock_timestamp())")
"$BIN" worker --queue w=64 --no-retention --no-scheduler --no-reconciler >/dev/null 2>&1 &
worker=$!
until [[ $("${PSQL[@]}" -d "$DB" -tA -f "$here/any-unfinished.sql") == f ]]; do
    sleep 0.05
done
kill -INT "$worker"
wait "$worker" || true
"${PSQL[@]}" -d "$DB" -tAc "
    SELECT round((extract(epoch FROM min(heartbeat_at)) - $launched)::numeric * 1000) || ' ms to the first claim; '
        || round(count(*) / extract(epoch FROM max(finished_at) - min(heartbeat_at))) || ' jobs/s first claim -> last completion; '
        || round(count(*) / (extract(epoch FROM max(finished_at)) - $launched)) || ' jobs/s from the launch'
    FROM jobs"
echo "first claims (ms : jobs): $("${PSQL[@]}" -d "$DB" -tAc "
    WITH first AS (SELECT min(heartbeat_at) AS at FROM jobs)
    SELECT string_agg(ms || ':' || n, ' ' ORDER BY at)
    FROM (SELECT heartbeat_at AS at, round(extract(epoch FROM heartbeat_at - first.at) * 1000) AS ms, count(*) AS n
          FROM jobs, first GROUP BY heartbeat_at, first.at ORDER BY heartbeat_at LIMIT 30) AS claims")"
