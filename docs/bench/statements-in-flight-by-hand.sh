#!/usr/bin/env bash
# What a database's backends are doing during a drain: samples
# pg_stat_activity about every 2-3 ms (SAMPLES of them, default 2000) and
# prints, for each kind of statement (a claim, a completion, the bench's
# progress check, anything else) and wait event, the share of samples in
# which at least one backend was running it, over the window in which a claim
# or completion was seen.
#
#   docs/bench/statements-in-flight-by-hand.sh DB
#
# Each sample is a statement of its own in autocommit, from one psql
# session. A sampler written as one server-side loop (a DO block) would hold
# its snapshot for the whole loop, and with it the horizon below which
# PostgreSQL may remove dead rows: the drain it watched would prune nothing.
set -euo pipefail
DB=$1
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
sample="SELECT 'tick', '', ''
UNION ALL
SELECT 's',
       CASE WHEN query LIKE '%WITH picked AS%' THEN 'claim'
            WHEN query LIKE '%Record the outcome%' THEN 'completion'
            WHEN query LIKE '%state IN (''QUEUED'', ''RETRY_WAIT'')%' THEN 'progress check'
            ELSE left(regexp_replace(query, '\s+', ' ', 'g'), 50) END,
       coalesce(wait_event_type || ':' || wait_event, 'cpu')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active';
SELECT pg_sleep(0.002);"
for _ in $(seq "${SAMPLES:-2000}"); do echo "$sample"; done |
    psql -h 127.0.0.1 -U postgres -X -q -At -F'|' -d "$DB" >"$raw"
python3 - "$raw" <<'PY'
import collections, sys
ticks, current = [], None
for line in open(sys.argv[1]):
    fields = line.rstrip("\n").split("|")
    if fields[0] == "tick":
        current = []
        ticks.append(current)
    elif fields[0] == "s" and current is not None:
        current.append((fields[1], fields[2]))
busy = [i for i, t in enumerate(ticks) if any(k in ("claim", "completion") for k, _ in t)]
if not busy:
    sys.exit("no claim or completion seen")
window = ticks[busy[0] : busy[-1] + 1]
seen = collections.Counter(kw for t in window for kw in set(t))
print(f"samples: {len(window)}")
for (kind, wait), n in seen.most_common(12):
    print(f"{kind:16} {wait:22} {100 * n / len(window):5.1f} %")
kinds = [{k for k, _ in t} for t in window]
both = sum(1 for k in kinds if {"claim", "completion"} <= k)
neither = sum(1 for k in kinds if not {"claim", "completion"} & k)
print(f"claim and completion both running: {100 * both / len(window):.1f} %, neither: {100 * neither / len(window):.1f} %")
PY
