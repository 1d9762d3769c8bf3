#!/usr/bin/env bash
# The broker path's slot hand-over by hand, stage by stage: tenant A's
# backlog (N jobs, default 20,000) on a broker queue of its own (a new
# topic each run: a topic's old wake-ups would be read again) capped at CAP
# running jobs per tenant (default 48), one `jobwire run` (worker with 64
# slots and the relay, in one process) on TRANSPORT (default kafka).
#
# Every job after A's first CAP gets its wake-up from a hand-over: the
# completion that frees a slot writes the next job's outbox row in its own
# transaction. A trigger added for this run (not part of the schema) notes
# when the relay deletes each outbox row, which it does once the broker has
# confirmed it. Per handed-over job, then:
#
#   freed     the outbox row's created_at: the freeing completion's now()
#   relayed   the relay's delete (clock_timestamp()), after the confirm
#   claimed   the job's heartbeat_at: its claim's now(), after the delivery
#
# and the script prints p50/p95/p99 of freed -> relayed, relayed -> claimed
# and freed -> claimed (the bench's "slot hand-over", which pairs finishes
# and starts by order instead), then the first two by 20 s of the run, and
# A's jobs/s. WATCH=name also prints that process's CPU share every 5 s.
#
#   DB=hob BIN=target/release/jobwire TRANSPORT=rabbitmq \
#       docs/bench/broker-hand-over-by-hand.sh
#
# LOG=file keeps the process's output (with RUST_LOG, e.g.
# RUST_LOG=jobwire_relay=debug for each relay pass).
#
# Needs the services of scripts/services running. Drops and recreates
# database DB (default jobwire_hand_over_by_hand) on the local PostgreSQL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_hand_over_by_hand}
N=${N:-20000}
CAP=${CAP:-48}
TRANSPORT=${TRANSPORT:-kafka}
QUEUE=hand_over_$(date +%s)
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" migrate >/dev/null
"$BIN" tenant set "$QUEUE" --max-running "$CAP" >/dev/null
"${PSQL[@]}" -d "$DB" -v ON_ERROR_STOP=1 -c "
    CREATE TABLE hand_over_log (message_key text, created_at timestamptz, relayed_at timestamptz);
    CREATE FUNCTION note_relayed() RETURNS trigger LANGUAGE plpgsql AS \$\$
    BEGIN
        INSERT INTO hand_over_log VALUES (OLD.message_key, OLD.created_at, clock_timestamp());
        RETURN NULL;
    END \$\$;
    CREATE TRIGGER note_relayed AFTER DELETE ON job_outbox FOR EACH ROW EXECUTE FUNCTION note_relayed();"
# shellcheck disable=SC2086 # EXTRA is a list of flags
"$BIN" run --transport "$TRANSPORT" --queue "$QUEUE=64" --consumer-group hand-over-by-hand \
    --no-retention --no-scheduler --no-reconciler ${EXTRA:-} >"${LOG:-/dev/null}" 2>&1 &
runner=$!
if [[ -n ${WATCH:-} ]]; then
    # The CPU share of process WATCH every 5 s (e.g. WATCH=nisshi, the
    # Kafka-protocol broker of scripts/services).
    watched=$(mktemp)
    (for ((i = 1; ; i++)); do
        sleep 5
        echo "$WATCH CPU % at $((i * 5)) s: $(top -b -n1 -d0.5 | awk -v p="$WATCH" '$12 == p {print $9}')"
    done >"$watched") &
    watcher=$!
fi
trap 'kill -INT $runner ${watcher:-} 2>/dev/null || true' EXIT
until [[ $("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM job_queues WHERE queue = '$QUEUE' AND dispatch = 'broker'") == 1 ]]; do
    sleep 0.2
done
sleep 3 # the consumer joins its group
"${PSQL[@]}" -d "$DB" \
    -c "INSERT INTO jobs (job_id, queue, job_type, tenant)
        SELECT jobwire_uuidv7(), '$QUEUE', 'noop', 'A' FROM generate_series(1, $N)"
deadline=$((SECONDS + ${TIMEOUT_S:-900}))
until [[ $("${PSQL[@]}" -d "$DB" -tA -f "$here/any-unfinished.sql") == f ]]; do
    if ((SECONDS > deadline)); then
        echo "not drained after ${TIMEOUT_S:-900} s; the figures below cover the jobs that ran" >&2
        break
    fi
    sleep 0.5
done
kill -INT "$runner"
wait "$runner" || true
trap - EXIT
if [[ -n ${WATCH:-} ]]; then
    kill "$watcher" 2>/dev/null || true
fi
"${PSQL[@]}" -d "$DB" -c "
    SELECT round(count(*) / extract(epoch FROM max(finished_at) - min(heartbeat_at))) AS a_jobs_per_s
    FROM jobs" -c "
    -- One row per handed-over job: every job whose wake-up was written
    -- after the enqueue (the first CAP got theirs from the enqueue itself).
    CREATE VIEW hand_overs AS
    SELECT extract(epoch FROM l.created_at - first.enqueued) AS since_enqueue_s,
           extract(epoch FROM l.relayed_at - l.created_at) * 1000 AS freed_relayed,
           extract(epoch FROM j.heartbeat_at - l.relayed_at) * 1000 AS relayed_claimed,
           extract(epoch FROM j.heartbeat_at - l.created_at) * 1000 AS freed_claimed
    FROM hand_over_log l JOIN jobs j ON j.job_id::text = l.message_key,
         (SELECT min(created_at) AS enqueued FROM jobs) first
    WHERE l.created_at > first.enqueued" -c "
    SELECT stage, count(*) AS hand_overs,
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms,
           round(percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p95_ms,
           round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p99_ms
    FROM hand_overs h
    CROSS JOIN LATERAL (VALUES (1, 'freed -> relayed', h.freed_relayed),
                               (2, 'relayed -> claimed', h.relayed_claimed),
                               (3, 'freed -> claimed', h.freed_claimed)) s(k, stage, ms)
    GROUP BY k, stage ORDER BY k"
echo "-- by 20 s of the run (freed -> relayed, relayed -> claimed; ms):"
"${PSQL[@]}" -d "$DB" -c "
    SELECT floor(since_enqueue_s / 20) * 20 AS s, count(*),
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY freed_relayed)::numeric, 1) AS fr50,
           round(percentile_cont(0.95) WITHIN GROUP (ORDER BY freed_relayed)::numeric, 1) AS fr95,
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY relayed_claimed)::numeric, 1) AS rc50,
           round(percentile_cont(0.95) WITHIN GROUP (ORDER BY relayed_claimed)::numeric, 1) AS rc95
    FROM hand_overs GROUP BY 1 ORDER BY 1"
if [[ -n ${WATCH:-} ]]; then
    cat "$watched"
    rm -f "$watched"
fi
