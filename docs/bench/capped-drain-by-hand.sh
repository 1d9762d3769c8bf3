#!/usr/bin/env bash
# The noisy-tenant drain by hand, to see its claims and completions one by
# one: tenant A's backlog (N jobs, default 100,000) on queue `noisy` capped at
# CAP running jobs per tenant (default 48), one `jobwire worker` with 64
# slots, and, with QUIET_S > 0, tenants B-K enqueueing 100 jobs/s in all for
# QUIET_S seconds (pgbench --rate). Prints A's jobs/s while the quiet tenants
# arrive (the whole drain without them), how many claim and completion
# statements there were and their mean size, and an 80 ms timeline from the
# middle of the drain. Jobs of one statement share its transaction's now():
# a claim's heartbeat_at, a completion's finished_at.
#
#   DB=capx BIN=target/release/jobwire EXTRA="--completion-linger-ms 0" \
#       docs/bench/capped-drain-by-hand.sh
#
# JOB and PAYLOAD set tenant A's jobs' type and payload (default `noop`,
# `{}`): JOB=sleep PAYLOAD='{"ms":10}' gives each job 10 ms of work. The
# worker renews its leases every 10 s, which sets `heartbeat_at` too: in a
# drain longer than that, a renewal shows as one more "claim" below.
#
# SETUP_SQL=file runs that file after the migrations (e.g.
# docs/bench/row-triggers-before.sql).
#
# SEEN_TENANTS=n gives the queue n more tenants seen before, with 20 slot
# rows each and no job; FINISHED_JOBS=n puts n finished jobs of another
# queue in the table (one that keeps what it ran, as retention allows).
# The slot table is analysed with the jobs before the worker starts (empty
# unless SEEN_TENANTS is set); outputs before 2026-12-05 left it unanalysed.
#
# RECONCILER=1 (only 1) runs the worker with its reconciler, whose first
# pass sweeps the slot rows of idle tenants (the SEEN_TENANTS ones); by
# default the worker runs without it.
#
# Drops and recreates database DB (default jobwire_capped_by_hand) on the
# local PostgreSQL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_capped_by_hand}
N=${N:-100000}
CAP=${CAP:-48}
JOB=${JOB:-noop}
PAYLOAD=${PAYLOAD:-'{}'}
QUIET_S=${QUIET_S:-0}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
"$BIN" migrate >/dev/null
if [[ -n ${SETUP_SQL:-} ]]; then
    "${PSQL[@]}" -d "$DB" -v ON_ERROR_STOP=1 -f "$SETUP_SQL" >/dev/null
fi
"$BIN" tenant set noisy --max-running "$CAP" >/dev/null
"${PSQL[@]}" -d "$DB" \
    -c "INSERT INTO jobs (job_id, queue, job_type, tenant, payload)
        SELECT jobwire_uuidv7(), 'noisy', '${JOB//\'/\'\'}', 'A', '${PAYLOAD//\'/\'\'}'::jsonb
        FROM generate_series(1, $N)" \
    -c "INSERT INTO job_tenant_slots (queue, tenant, slot)
        SELECT 'noisy', 'seen-' || t, s
        FROM generate_series(1, ${SEEN_TENANTS:-0}) t, generate_series(1, 20) s" \
    -c "INSERT INTO jobs (job_id, queue, job_type, state, attempt_count, lease_generation,
                          finished_at, created_at, updated_at)
        SELECT jobwire_uuidv7(), 'old', 'noop', 'SUCCEEDED', 1, 1,
               now() - interval '1 hour', now() - interval '2 hours', now() - interval '1 hour'
        FROM generate_series(1, ${FINISHED_JOBS:-0})" \
    -c "VACUUM ANALYZE jobs, job_tenant_slots"
reconciler=--no-reconciler
if [[ ${RECONCILER:-0} == 1 ]]; then
    reconciler=
fi
# shellcheck disable=SC2086 # EXTRA is a list of flags; $reconciler may be empty
"$BIN" worker --queue noisy=64 --no-retention --no-scheduler $reconciler ${EXTRA:-} \
    >/dev/null 2>&1 &
worker=$!
if ((QUIET_S > 0)); then
    pgbench -h 127.0.0.1 -U postgres -n -c 2 -j 1 --rate 100 -T "$QUIET_S" \
        -f "$here/capped-drain-quiet-tenants.sql" "$DB" >/dev/null 2>&1
fi
until [[ $("${PSQL[@]}" -d "$DB" -tA -f "$here/any-unfinished.sql") == f ]]; do
    sleep 0.5
done
kill -INT "$worker"
wait "$worker" || true
"${PSQL[@]}" -d "$DB" -c "
    WITH w AS (SELECT min(heartbeat_at) AS t0,
                      coalesce((SELECT max(created_at) FROM jobs WHERE tenant <> 'A'), max(finished_at)) AS t1
               FROM jobs WHERE tenant = 'A')
    SELECT round(count(*) / extract(epoch FROM t1 - t0)) AS a_jobs_per_s
    FROM jobs, w WHERE tenant = 'A' AND finished_at BETWEEN t0 AND t1 GROUP BY t0, t1" -c "
    SELECT 'claims' AS statements, count(*), round(avg(n), 1) AS mean_jobs
    FROM (SELECT heartbeat_at, count(*) AS n FROM jobs WHERE queue = 'noisy' GROUP BY 1) c
    UNION ALL
    SELECT 'completions', count(*), round(avg(n), 1)
    FROM (SELECT finished_at, count(*) AS n FROM jobs WHERE queue = 'noisy' GROUP BY 1) c" -c "
    WITH c AS (SELECT heartbeat_at AS t, 'claim' AS what, count(*) AS jobs
               FROM jobs WHERE queue = 'noisy' GROUP BY 1
               UNION ALL SELECT finished_at, 'completion', count(*)
               FROM jobs WHERE queue = 'noisy' GROUP BY 1),
         mid AS (SELECT min(t) + (max(t) - min(t)) / 2 AS m FROM c)
    SELECT round(extract(epoch FROM t - m) * 1000, 2) AS ms, what, jobs
    FROM c, mid WHERE t BETWEEN m AND m + interval '80 ms' ORDER BY t"
