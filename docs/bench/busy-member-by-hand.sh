#!/usr/bin/env bash
# A worker started to help with a busy broker queue, by hand.
#
# One `jobwire run` (relay and worker) serves queue Q on TRANSPORT
# (default kafka; or rabbitmq) with SLOTS slots (default 1), each running
# a job that sleeps BUSY_MS (default 30,000): every slot busy. pgbench then
# enqueues single no-op jobs into Q at RATE/s (default 50) for STREAM_S
# seconds (default 40); JOIN_AT s in (default 5), a `jobwire worker` for Q
# (16 slots, the same --consumer-group) starts to help. Until the long
# jobs end, every stream job claimed is the helper's. Reports, in s from
# the stream's first job, when the helper started, when a stream job was
# first claimed and when the first long job ended; per 2.5 s of the
# stream, how many of its jobs were claimed and their enqueue -> claim
# p50/max; how many stream jobs each worker claimed (a trigger records
# each claim's lease owner: the busy worker claims only what waited for
# its slots); and the summary over the whole stream
# (enqueue-to-claim.sql; the long jobs left out). Both processes run
# without reconciler, retention or scheduler, and the safety net (3 min)
# does not come into play in a 40 s stream, so nothing but the helper and
# the freed slots claims.
#
#   DB=kbm BIN=target/release/jobwire docs/bench/busy-member-by-hand.sh
#
# LOG=file keeps the `jobwire run` process's output (the helper's goes to
# LOG.helper). Needs the services of scripts/services running (Kafka on
# 127.0.0.1:9092, RabbitMQ on 127.0.0.1:5672) and pgbench. Drops and
# recreates database DB (default jobwire_busy_member_by_hand) on the local
# PostgreSQL. Each run uses a new queue (so a new topic) and, on Kafka, a
# new group prefix.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_busy_member_by_hand}
TRANSPORT=${TRANSPORT:-kafka}
SLOTS=${SLOTS:-1}
BUSY_MS=${BUSY_MS:-30000}
RATE=${RATE:-50}
STREAM_S=${STREAM_S:-40}
JOIN_AT=${JOIN_AT:-5}
run_id=$(date +%s)
Q=busy_member_$run_id
GROUP=busy-member-$run_id
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS \"$DB\"" -c "CREATE DATABASE \"$DB\""
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" migrate >/dev/null
"${PSQL[@]}" -d "$DB" -c "CREATE TABLE busy_member_marks (what text, at timestamptz)" -c "
    CREATE TABLE busy_member_claims (job_id uuid, owner text);
    CREATE FUNCTION busy_member_claimed() RETURNS trigger LANGUAGE plpgsql AS
        'BEGIN INSERT INTO busy_member_claims VALUES (NEW.job_id, NEW.lease_owner); RETURN NULL; END';
    CREATE TRIGGER busy_member_claimed AFTER UPDATE OF lease_owner ON jobs FOR EACH ROW
        WHEN (NEW.lease_owner IS NOT NULL AND NEW.lease_owner IS DISTINCT FROM OLD.lease_owner)
        EXECUTE FUNCTION busy_member_claimed()"
common=(--consumer-group "$GROUP" --no-retention --no-scheduler --no-reconciler)
"$BIN" run --transport "$TRANSPORT" --queue "$Q=$SLOTS" --worker-id busy "${common[@]}" >"${LOG:-/dev/null}" 2>&1 &
runner=$!
helper=
producer=
script=$(mktemp)
trap 'kill -INT $runner $helper $producer 2>/dev/null || true; rm -f "$script"' EXIT
# shellcheck source=docs/bench/wait-for.sh
. "$here/wait-for.sh"
wait_for 1 "SELECT count(*) FROM job_queues WHERE queue = '$Q' AND dispatch = 'broker'"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO jobs (job_id, queue, job_type, payload)
    SELECT jobwire_uuidv7(), '$Q', 'sleep', '{\"ms\": $BUSY_MS}' FROM generate_series(1, $SLOTS)"
wait_for "$SLOTS" "SELECT count(*) FROM jobs WHERE queue = '$Q' AND state = 'RUNNING'"
echo "INSERT INTO jobs (job_id, queue, job_type) VALUES (jobwire_uuidv7(), '$Q', 'noop');" >"$script"
pgbench -n -h 127.0.0.1 -U postgres -c 1 -R "$RATE" -T "$STREAM_S" -f "$script" "$DB" >/dev/null 2>&1 &
producer=$!
sleep "$JOIN_AT"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO busy_member_marks VALUES ('helper starts', clock_timestamp())"
"$BIN" worker --transport "$TRANSPORT" --queue "$Q=16" --worker-id helper "${common[@]}" >"${LOG:-/dev/null}${LOG:+.helper}" 2>&1 &
helper=$!
wait "$producer"
producer=
deadline=$((SECONDS + 120))
until [[ $("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM jobs WHERE queue = '$Q' AND heartbeat_at IS NULL") == 0 ]]; do
    if ((SECONDS > deadline)); then
        echo "the stream's jobs not all claimed after 120 s; the figures below cover those that were" >&2
        break
    fi
    sleep 0.5
done
kill -INT "$helper" "$runner"
wait "$helper" "$runner" || true
trap - EXIT
rm -f "$script"
"${PSQL[@]}" -d "$DB" -c "CREATE VIEW stream AS SELECT * FROM jobs WHERE queue = '$Q' AND job_type = 'noop'"
echo "-- the stream's enqueue -> claim per 2.5 s of the stream (s: from its first job):"
"${PSQL[@]}" -d "$DB" -c "
    WITH first AS (SELECT min(created_at) AS at FROM stream),
    timed AS (
        SELECT extract(epoch FROM j.created_at - f.at) AS s,
               extract(epoch FROM j.heartbeat_at - j.created_at) * 1000 AS ms
        FROM stream j, first f WHERE j.heartbeat_at IS NOT NULL
    )
    SELECT floor(s / 2.5) * 2.5 AS s, count(*) AS jobs,
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms,
           round(max(ms)::numeric, 1) AS max_ms
    FROM timed GROUP BY 1 ORDER BY 1"
echo "-- when (s from the stream's first job):"
"${PSQL[@]}" -d "$DB" -c "
    WITH first AS (SELECT min(created_at) AS at FROM stream)
    SELECT w.what, round(extract(epoch FROM w.at - f.at)::numeric, 1) AS s
    FROM (SELECT what, at FROM busy_member_marks
          UNION ALL SELECT 'first stream job claimed', min(heartbeat_at) FROM stream
          UNION ALL SELECT 'first long job ended', min(finished_at) FROM jobs
                    WHERE queue = '$Q' AND job_type = 'sleep') w, first f
    ORDER BY w.at"
echo "-- the stream's jobs by the worker that claimed them:"
"${PSQL[@]}" -d "$DB" -c "
    SELECT c.owner, count(*) AS jobs,
           round(max(extract(epoch FROM s.heartbeat_at - s.created_at))::numeric, 1) AS max_wait_s
    FROM stream s JOIN busy_member_claims c USING (job_id) GROUP BY 1 ORDER BY 1"
"${PSQL[@]}" -d "$DB" -v queue="$Q" -v job_type=noop -f "$here/enqueue-to-claim.sql"
