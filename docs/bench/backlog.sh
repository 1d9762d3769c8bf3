#!/usr/bin/env bash
# A fresh database DB with N jobs queued on queue `w` (JOB_TYPE, default
# `noop`, with PAYLOAD, default `{}`), vacuumed, analyzed and checkpointed,
# ready for a worker. Used by the by-hand scripts beside it:
#
#   BIN=target/release/jobwire docs/bench/backlog.sh DB N
#   JOB_TYPE=sleep PAYLOAD='{"ms": 3000}' docs/bench/backlog.sh DB 400
set -euo pipefail
DB=$1
N=$2
BIN=${BIN:-target/release/jobwire}
JOB_TYPE=${JOB_TYPE:-noop}
PAYLOAD=${PAYLOAD:-'{}'}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB "$BIN" migrate >/dev/null
"${PSQL[@]}" -d "$DB" \
    -c "INSERT INTO jobs (job_id, queue, job_type, payload)
        SELECT jobwire_uuidv7(), 'w', '$JOB_TYPE', '$PAYLOAD'::jsonb FROM generate_series(1, $N)" \
    -c "VACUUM ANALYZE jobs" -c "CHECKPOINT"
