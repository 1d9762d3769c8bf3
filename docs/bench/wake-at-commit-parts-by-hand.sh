#!/usr/bin/env bash
# What each part of the wake-up decided at commit (jobwire_wake_at_commit,
# migration 20261201000008) costs a single-job enqueue transaction: pgbench
# with 8 clients, 5 s per variant, ROUNDS rounds (default 2), of a business
# row and a job on a PostgreSQL-path queue, no worker. The trigger function
# is replaced by each variant in turn:
#   current            the function as migrated;
#   empty body         the deferred trigger fires, the function does nothing;
#   checks, no notify  every check and the wake token, no NOTIFY;
#   notify always      a NOTIFY from every commit, no token;
#   token + notify     the token and the NOTIFY, no other check;
#   trigger off        no trigger at all.
#
#   BIN=target/release/jobwire docs/bench/wake-at-commit-parts-by-hand.sh
#
# Drops and recreates database DB (default jobwire_wake_parts).
set -euo pipefail
BIN=${BIN:-target/release/jobwire}
DB=${DB:-jobwire_wake_parts}
ROUNDS=${ROUNDS:-2}
PSQL=(psql -h 127.0.0.1 -U postgres -X -q)
BIN="$BIN" "$(dirname "$0")/producer-db.sh" "$DB"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/job.sql" <<'SQL'
BEGIN;
INSERT INTO bench_orders (id) VALUES (gen_random_uuid());
INSERT INTO jobs (job_id, queue, job_type, priority, payload, max_attempts, run_after)
VALUES (jobwire_uuidv7(), 'e2e', 'noop', 0, '{"n":1}', 3, now());
COMMIT;
SQL
migrated=$("${PSQL[@]}" -d "$DB" -At -c "SELECT pg_get_functiondef('jobwire_wake_at_commit'::regproc)")
run() {
    "${PSQL[@]}" -d "$DB" -c "TRUNCATE bench_orders" -c "DELETE FROM jobs" -c "VACUUM jobs" \
        -c "CHECKPOINT" >/dev/null
    pgbench -h 127.0.0.1 -U postgres -n -c 8 -j 2 -T 5 -M prepared -f "$dir/job.sql" "$DB" 2>&1 |
        sed -n 's/^tps = \([0-9]*\).*/\1/p'
}
variant() {
    "${PSQL[@]}" -d "$DB" -c "CREATE OR REPLACE FUNCTION jobwire_wake_at_commit() RETURNS trigger
        LANGUAGE plpgsql AS \$f\$ BEGIN $2 RETURN NULL; END; \$f\$"
    echo "round $round: $1 $(run) tx/s"
}
token_notify="IF jobwire_wake_token('jobwire_jobs', NEW.queue) THEN
    PERFORM pg_notify('jobwire_jobs', NEW.queue); END IF;"
checks="IF NEW.run_after > now()
       OR current_setting('jobwire.woken_queue', true) IS NOT DISTINCT FROM NEW.queue THEN
    RETURN NULL; END IF;
    PERFORM set_config('jobwire.woken_queue', NEW.queue, true);
    IF NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = NEW.queue AND q.dispatch = 'broker')
       AND jobwire_wake_token('jobwire_jobs', NEW.queue) THEN NULL; END IF;"
for round in $(seq 1 "$ROUNDS"); do
    "${PSQL[@]}" -d "$DB" -c "$migrated"
    echo "round $round: current $(run) tx/s"
    variant "empty body" ""
    variant "checks, no notify" "$checks"
    variant "notify always" "PERFORM pg_notify('jobwire_jobs', NEW.queue);"
    variant "token + notify" "$token_notify"
    "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs DISABLE TRIGGER jobs_wake_at_commit"
    echo "round $round: trigger off $(run) tx/s"
    "${PSQL[@]}" -d "$DB" -c "ALTER TABLE jobs ENABLE TRIGGER jobs_wake_at_commit"
done
"${PSQL[@]}" -c "DROP DATABASE $DB"
