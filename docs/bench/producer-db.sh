#!/usr/bin/env bash
# A fresh database DB for measuring producers' transactions by hand: the
# schema, the bench's business table `bench_orders`, a narrow four-column
# table, the PostgreSQL-path queue `e2e` and a broker queue `elsewhere` (as
# in a deployment that uses both). Used by the by-hand scripts beside it:
#
#   BIN=target/release/jobwire docs/bench/producer-db.sh DB
set -euo pipefail
DB=$1
BIN=${BIN:-target/release/jobwire}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB "$BIN" migrate >/dev/null
"${PSQL[@]}" -d "$DB" \
    -c "CREATE TABLE bench_orders (id uuid PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())" \
    -c "CREATE TABLE narrow (id uuid PRIMARY KEY, queue text, job_type text, payload jsonb)" \
    -c "INSERT INTO job_queues (queue) VALUES ('e2e')" \
    -c "INSERT INTO job_queues (queue, dispatch, topic) VALUES ('elsewhere', 'broker', 'wake')"
