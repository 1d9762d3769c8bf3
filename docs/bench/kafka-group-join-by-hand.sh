#!/usr/bin/env bash
# What a Kafka queue's wake-ups see while a worker for ANOTHER queue joins
# and leaves the same --consumer-group, by hand.
#
# One `jobwire run` (relay and worker) serves queue S (16 slots) and queue
# B (1 slot) on Kafka. Before the stream, B's one slot takes a job that
# sleeps BUSY_MS (default 20,000; 0: none): a queue busy with long jobs,
# whose loop receives no wake-ups until a slot frees.
# pgbench enqueues single-job transactions into S at RATE/s (default 100)
# for STREAM_S seconds (default 40). At JOIN_AT s (default 10) a `jobwire worker`
# for queue O (a topic of its own) starts with the same --consumer-group;
# LEAVE_AFTER s later (default 15) it stops; meanwhile one job enqueued on
# O shows when O's worker had joined its group and received ("O serves").
# Then, for S's jobs, the enqueue -> claim time (created_at -> heartbeat_at,
# the claim's now()): p50/p95/max over the whole stream, and by 2.5 s of
# it; and when (s from S's first job) B got busy, O started, O served, B's
# job ended and O stopped.
#
#   DB=kgj BIN=target/release/jobwire docs/bench/kafka-group-join-by-hand.sh
#
# LOG=file keeps the `jobwire run` process's output (O's goes to LOG.o).
#
# Needs the services of scripts/services running (Kafka on 127.0.0.1:9092)
# and pgbench. Drops and recreates database DB (default
# jobwire_group_join_by_hand) on the local PostgreSQL. Each run uses new
# queues, topics and a new group prefix.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_group_join_by_hand}
RATE=${RATE:-100}
STREAM_S=${STREAM_S:-40}
JOIN_AT=${JOIN_AT:-10}
LEAVE_AFTER=${LEAVE_AFTER:-15}
run_id=$(date +%s)
S=steady_$run_id
O=other_$run_id
B=busy_$run_id
BUSY_MS=${BUSY_MS:-20000}
GROUP=group-join-$run_id
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS \"$DB\"" -c "CREATE DATABASE \"$DB\""
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" migrate >/dev/null
"${PSQL[@]}" -d "$DB" -c "CREATE TABLE group_join_marks (what text, at timestamptz)"
common=(--consumer-group "$GROUP" --no-retention --no-scheduler --no-reconciler)
"$BIN" run --transport kafka --queue "$S=16" --queue "$B=1" "${common[@]}" >"${LOG:-/dev/null}" 2>&1 &
runner=$!
other=
producer=
script=$(mktemp)
trap 'kill -INT $runner $other $producer 2>/dev/null || true; rm -f "$script"' EXIT
# shellcheck source=docs/bench/wait-for.sh
. "$here/wait-for.sh"
wait_for 1 "SELECT count(*) FROM job_queues WHERE queue = '$S' AND dispatch = 'broker'"
sleep 6 # the groups form
if ((BUSY_MS > 0)); then
    "${PSQL[@]}" -d "$DB" -c "INSERT INTO jobs (job_id, queue, job_type, payload)
        VALUES (jobwire_uuidv7(), '$B', 'sleep', '{\"ms\": $BUSY_MS}')"
    wait_for 1 "SELECT count(*) FROM jobs WHERE queue = '$B' AND state = 'RUNNING'"
    "${PSQL[@]}" -d "$DB" -c "INSERT INTO group_join_marks VALUES ('B busy', clock_timestamp())"
fi
echo "INSERT INTO jobs (job_id, queue, job_type) VALUES (jobwire_uuidv7(), '$S', 'noop');" >"$script"
pgbench -n -h 127.0.0.1 -U postgres -c 1 -R "$RATE" -T "$STREAM_S" -f "$script" "$DB" >/dev/null 2>&1 &
producer=$!
sleep "$JOIN_AT"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO group_join_marks VALUES ('O starts', clock_timestamp())"
"$BIN" worker --transport kafka --queue "$O=4" "${common[@]}" >"${LOG:-/dev/null}${LOG:+.o}" 2>&1 &
other=$!
wait_for 1 "SELECT count(*) FROM job_queues WHERE queue = '$O' AND dispatch = 'broker'"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO jobs (job_id, queue, job_type) VALUES (jobwire_uuidv7(), '$O', 'noop')"
sleep "$LEAVE_AFTER"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO group_join_marks VALUES ('O stops', clock_timestamp())"
kill -INT "$other"
wait "$other" || true
other=
wait "$producer"
producer=
deadline=$((SECONDS + 120))
until [[ $("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM jobs WHERE queue = '$S' AND heartbeat_at IS NULL") == 0 ]]; do
    if ((SECONDS > deadline)); then
        echo "S's jobs not all claimed after 120 s; the figures below cover those that were" >&2
        break
    fi
    sleep 0.5
done
kill -INT "$runner"
wait "$runner" || true
trap - EXIT
rm -f "$script"
"${PSQL[@]}" -d "$DB" -v queue="$S" -f "$here/enqueue-to-claim.sql"
echo "-- S's enqueue -> claim by 2.5 s of the stream (s: from the first job):"
"${PSQL[@]}" -d "$DB" -c "
    WITH first AS (SELECT min(created_at) AS at FROM jobs WHERE queue = '$S'),
    timed AS (
        SELECT extract(epoch FROM j.created_at - f.at) AS s,
               extract(epoch FROM j.heartbeat_at - j.created_at) * 1000 AS ms
        FROM jobs j, first f WHERE j.queue = '$S' AND j.heartbeat_at IS NOT NULL
    )
    SELECT floor(s / 2.5) * 2.5 AS s, count(*) AS jobs,
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms,
           round(max(ms)::numeric, 1) AS max_ms,
           min(m.marks) AS marks
    FROM timed t
    LEFT JOIN (SELECT floor(extract(epoch FROM m.at - f.at) / 2.5) AS bucket,
                      string_agg(m.what, ', ' ORDER BY m.at) AS marks
               FROM group_join_marks m, first f GROUP BY 1) m ON m.bucket = floor(t.s / 2.5)
    GROUP BY floor(t.s / 2.5) ORDER BY 1"
echo "-- when (s from S's first job):"
"${PSQL[@]}" -d "$DB" -c "
    WITH first AS (SELECT min(created_at) AS at FROM jobs WHERE queue = '$S')
    SELECT w.what, round(extract(epoch FROM w.at - f.at)::numeric, 1) AS s
    FROM (SELECT what, at FROM group_join_marks
          UNION ALL SELECT 'B finished', finished_at FROM jobs WHERE queue = '$B'
          UNION ALL SELECT 'O serves', heartbeat_at FROM jobs WHERE queue = '$O') w, first f
    ORDER BY w.at"
