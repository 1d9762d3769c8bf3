#!/usr/bin/env bash
# Where a drain's CPU goes: N no-op jobs (default 200,000) on queue `w`,
# drained by WORKERS `jobwire worker` processes (default 1) serving QUEUE
# (default w=64) with EXTRA arguments. Prints the drain's jobs/s (first
# claim to last completion) and how much of the machine's CPU stood idle
# from the workers' start to the last completion (/proc/stat).
#
#   DB=cpux BIN=target/release/jobwire docs/bench/drain-cpu-by-hand.sh
#   WORKERS=2 QUEUE=w=32 docs/bench/drain-cpu-by-hand.sh
#   EXTRA="--claim-ahead 2048" docs/bench/drain-cpu-by-hand.sh
#
# PERF=1 also records `perf record -a` for PERF_S seconds (default 6) from a
# second into the drain, into perf-drain.data in the current directory:
# `perf report -i perf-drain.data --sort comm` splits it by process. (With
# PERF_PID=1 it records only the first worker, with DWARF call graphs, for
# `perf report --children`.)
#
# Drops and recreates database DB (default jobwire_drain_cpu) on the local
# PostgreSQL; run nothing else on the machine beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_drain_cpu}
N=${N:-200000}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
BIN=$BIN "$here/backlog.sh" "$DB" "$N"
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
cpu() { grep '^cpu ' /proc/stat; }
read -r _ user1 nice1 system1 idle1 iowait1 _ < <(cpu)
workers=()
for _ in $(seq "${WORKERS:-1}"); do
    # shellcheck disable=SC2086 # EXTRA is a list of arguments
    "$BIN" worker --queue "${QUEUE:-w=64}" --no-retention --no-scheduler --no-reconciler \
        ${EXTRA:-} >/dev/null 2>&1 &
    workers+=($!)
done
if [[ -n ${PERF:-} ]]; then
    sleep 1
    if [[ -n ${PERF_PID:-} ]]; then
        perf record -F 499 --call-graph dwarf,16384 -p "${workers[0]}" -o perf-drain.data \
            -- sleep "${PERF_S:-3}" >/dev/null 2>&1
    else
        perf record -a -F 1999 -o perf-drain.data -- sleep "${PERF_S:-6}" >/dev/null 2>&1
    fi
fi
until [[ $("${PSQL[@]}" -d "$DB" -tA -f "$here/any-unfinished.sql") == f ]]; do
    sleep 0.1
done
read -r _ user2 nice2 system2 idle2 iowait2 _ < <(cpu)
kill -INT "${workers[@]}"
wait "${workers[@]}" || true
busy=$(((user2 - user1) + (nice2 - nice1) + (system2 - system1)))
idle=$(((idle2 - idle1) + (iowait2 - iowait1)))
echo "jobs/s: $("${PSQL[@]}" -d "$DB" -tAc \
    "SELECT round(count(*) / extract(epoch FROM max(finished_at) - min(heartbeat_at))) FROM jobs")"
echo "idle CPU: $((100 * idle / (busy + idle))) %"
