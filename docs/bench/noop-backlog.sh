#!/usr/bin/env bash
# A fresh database DB with N no-op jobs queued on queue `w`, vacuumed,
# analyzed and checkpointed, ready for a drain. Used by the drain scripts
# beside it:
#
#   BIN=target/release/jobwire docs/bench/noop-backlog.sh DB N
set -euo pipefail
DB=$1
N=$2
BIN=${BIN:-target/release/jobwire}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB "$BIN" migrate >/dev/null
"${PSQL[@]}" -d "$DB" \
    -c "INSERT INTO jobs (job_id, queue, job_type) SELECT jobwire_uuidv7(), 'w', 'noop' FROM generate_series(1, $N)" \
    -c "VACUUM ANALYZE jobs" -c "CHECKPOINT"
