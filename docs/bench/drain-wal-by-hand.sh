#!/usr/bin/env bash
# What a drain writes to the WAL, record type by record type: N no-op jobs
# (default 20,000) on queue `w`, drained by one `jobwire worker` with 64
# slots (its default local queue), and `pg_waldump --stats=record` over
# exactly the drain's WAL. Prints the WAL bytes per job, the checkpoints
# that fell inside the drain (each makes the next change of every page
# write that whole page: "full page images"), and the per-record table.
#
#   DB=walx BIN=target/release/jobwire docs/bench/drain-wal-by-hand.sh
#
# FILLFACTOR=N sets the jobs table's fillfactor before the jobs are written;
# SETUP_SQL=file runs that file after the migrations (e.g.
# docs/bench/row-triggers-before.sql). PAYLOAD_BYTES=N gives every job a
# payload of N incompressible bytes (default: the empty payload, {}), and
# TRACED=1 a traceparent. CAP=N puts every job under one tenant capped at N
# running jobs. Also prints the drain's jobs/s, from its first
# claim to its last completion.
#
# Drops and recreates database DB (default jobwire_drain_wal) on the local
# PostgreSQL; reads its WAL files, so run it on the database's machine as a
# user who can (WAL_DIR, default /var/lib/postgresql/15/main/pg_wal; WALDUMP,
# pg_waldump on the PATH or PostgreSQL 15's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_drain_wal}
N=${N:-20000}
WAL_DIR=${WAL_DIR:-/var/lib/postgresql/15/main/pg_wal}
WALDUMP=${WALDUMP:-$(command -v pg_waldump || echo /usr/lib/postgresql/15/bin/pg_waldump)}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" migrate >/dev/null
if [[ -n ${SETUP_SQL:-} ]]; then
    "${PSQL[@]}" -d "$DB" -v ON_ERROR_STOP=1 -f "$SETUP_SQL"
fi
if [[ -n ${CAP:-} ]]; then
    "$BIN" tenant set w --max-running "$CAP" >/dev/null
fi
if [[ -n ${FILLFACTOR:-} ]]; then
    "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs SET (fillfactor = $FILLFACTOR)"
fi
"${PSQL[@]}" -d "$DB" \
    -c "INSERT INTO jobs (job_id, queue, job_type, tenant, payload, traceparent)
        SELECT jobwire_uuidv7(), 'w', 'noop', CASE WHEN '${CAP:-}' <> '' THEN 'A' END,
               CASE WHEN ${PAYLOAD_BYTES:-0} > 0
                    THEN jsonb_build_object('filler', left(
                        (SELECT string_agg(md5(i::text || g::text), '')
                         FROM generate_series(1, ${PAYLOAD_BYTES:-0} / 32 + 1) p(g)),
                        ${PAYLOAD_BYTES:-0}))
                    ELSE '{}' END,
               CASE WHEN '${TRACED:-0}' = '1'
                    THEN '00-' || md5(i::text) || '-' || left(md5((i + 1)::text), 16) || '-01' END
        FROM generate_series(1, $N) i" \
    -c "VACUUM ANALYZE jobs"
lsn() { "${PSQL[@]}" -d "$DB" -tAc "SELECT pg_current_wal_lsn()"; }
checkpoints() { "${PSQL[@]}" -d "$DB" -tAc "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"; }
start=$(lsn)
checkpoints_before=$(checkpoints)
"$BIN" worker --queue w=64 --no-retention --no-scheduler --no-reconciler >/dev/null 2>&1 &
worker=$!
until [[ $("${PSQL[@]}" -d "$DB" -tA -f "$here/any-unfinished.sql") == f ]]; do
    sleep 0.2
done
end=$(lsn)
checkpoints_after=$(checkpoints)
kill -INT "$worker"
wait "$worker" || true
echo "jobs: $N"
echo "WAL bytes per job: $("${PSQL[@]}" -d "$DB" -tAc "SELECT round(pg_wal_lsn_diff('$end', '$start') / $N)")"
echo "checkpoints during the drain: $((checkpoints_after - checkpoints_before))"
echo "jobs/s: $("${PSQL[@]}" -d "$DB" -tAc \
    "SELECT round(count(*) / extract(epoch FROM max(finished_at) - min(heartbeat_at))) FROM jobs")"
# Every record in the range, whichever database wrote it: run nothing else
# beside the drain.
"$WALDUMP" -p "$WAL_DIR" -s "$start" -e "$end" --stats=record |
    awk 'NR <= 2 || $2 > 0'
