# shellcheck shell=bash
# Sourced by the by-hand scripts beside it (they set PSQL and DB):
# wait_for COUNT QUERY waits at most 60 s for QUERY, run on DB, to answer
# COUNT, and ends the script if it does not.
wait_for() {
    local deadline=$((SECONDS + 60))
    until [[ $("${PSQL[@]}" -d "$DB" -tAc "$2") == "$1" ]]; do
        if ((SECONDS > deadline)); then
            echo "gave up after 60 s waiting for: $2" >&2
            exit 1
        fi
        sleep 0.1
    done
}
