#!/usr/bin/env bash
# A Kafka worker's first seconds, by hand: what a queue's jobs wait while
# the worker that serves it (and a second queue) starts.
#
# One `jobwire run` (relay and worker) starts with queues A and Q (8 slots
# each) on Kafka, new topics and a new --consumer-group prefix. As soon as
# it has declared A broker-dispatched, pgbench enqueues single-job
# transactions into A at RATE/s (default 100) for STREAM_S seconds
# (default 10). Then A's enqueue -> claim time (created_at ->
# heartbeat_at, the claim's now()): p50/p95/max over the stream, and by
# 0.5 s of it.
#
#   DB=kws BIN=target/release/jobwire docs/bench/kafka-worker-start-by-hand.sh
#
# LOG=file keeps the process's output. Needs the services of
# scripts/services running (Kafka on 127.0.0.1:9092) and pgbench. Drops and
# recreates database DB (default jobwire_worker_start_by_hand) on the local
# PostgreSQL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_worker_start_by_hand}
RATE=${RATE:-100}
STREAM_S=${STREAM_S:-10}
run_id=$(date +%s)
A=first_$run_id
Q=second_$run_id
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS \"$DB\"" -c "CREATE DATABASE \"$DB\""
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" migrate >/dev/null
script=$(mktemp)
echo "INSERT INTO jobs (job_id, queue, job_type) VALUES (jobwire_uuidv7(), '$A', 'noop');" >"$script"
"$BIN" run --transport kafka --queue "$A=8" --queue "$Q=8" --consumer-group "worker-start-$run_id" \
    --no-retention --no-scheduler --no-reconciler >"${LOG:-/dev/null}" 2>&1 &
runner=$!
trap 'kill -INT $runner 2>/dev/null || true; rm -f "$script"' EXIT
deadline=$((SECONDS + 60))
until [[ $("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM job_queues WHERE queue = '$A' AND dispatch = 'broker'") == 1 ]]; do
    if ((SECONDS > deadline)); then
        echo "the worker did not declare $A within 60 s" >&2
        exit 1
    fi
    sleep 0.05
done
pgbench -n -h 127.0.0.1 -U postgres -c 1 -R "$RATE" -T "$STREAM_S" -f "$script" "$DB" >/dev/null 2>&1
deadline=$((SECONDS + 60))
until [[ $("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM jobs WHERE queue = '$A' AND heartbeat_at IS NULL") == 0 ]]; do
    if ((SECONDS > deadline)); then
        echo "A's jobs not all claimed after 60 s; the figures below cover those that were" >&2
        break
    fi
    sleep 0.2
done
"${PSQL[@]}" -d "$DB" -v queue="$A" -f "$here/enqueue-to-claim.sql"
echo "-- A's enqueue -> claim by 0.5 s of the stream (s: from the first job):"
"${PSQL[@]}" -d "$DB" -c "
    WITH first AS (SELECT min(created_at) AS at FROM jobs WHERE queue = '$A')
    SELECT floor(extract(epoch FROM j.created_at - f.at) / 0.5) * 0.5 AS s, count(*) AS jobs,
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.heartbeat_at - j.created_at) * 1000)::numeric, 1) AS p50_ms,
           round(max(extract(epoch FROM j.heartbeat_at - j.created_at) * 1000)::numeric, 1) AS max_ms
    FROM jobs j, first f WHERE j.queue = '$A' AND j.heartbeat_at IS NOT NULL
    GROUP BY 1 ORDER BY 1"
