#!/usr/bin/env bash
# The capped claim tried in docs/benchmarks.md ("Tried, not landed: a
# capped tenant's slots refilled in two waves"): the function of migration
# 20261202000005 with one limit changed, each tenant taking at most half
# its cap per claim. Prints the SQL; load it after `jobwire migrate`:
#   docs/bench/capped-waves-tried.sh | psql "$DATABASE_URL"
set -euo pipefail
cd "$(dirname "$0")/../.."
sed -n '/^CREATE OR REPLACE FUNCTION jobwire_claim_capped/,/^\$\$;/p' \
    migrations/20261202000005_capped_claim_locks_only_needed_slots.sql |
    sed 's/LIMIT least(c.cap, p_limit)) w/LIMIT least((c.cap + 1) \/ 2, p_limit)) w/'
