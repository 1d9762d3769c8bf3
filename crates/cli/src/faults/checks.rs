//! What the scenario installs to watch the jobs table, and the checks it
//! runs on the contract columns afterwards.
//!
//! Two instruments live in the scenario's own database only: the
//! `handler_runs` table the `record_run` handler writes a row to on every
//! run (the side effect), and `fault_transitions`, a trigger's record of
//! every state change with the lease generation it happened under. Between
//! them they say whether any side effect ran twice without a lost or failed
//! attempt to explain it.

use anyhow::Result;
use serde::Serialize;
use sqlx::PgPool;

use super::load::JOB_TYPE;

/// The instruments: created after the migrations, before any job.
pub(crate) const INSTRUMENTS: &str = r#"
CREATE TABLE handler_runs (
    job_id           uuid NOT NULL,
    lease_generation bigint NOT NULL,
    attempt          integer NOT NULL,
    worker_id        text NOT NULL,
    ran_at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX handler_runs_job_idx ON handler_runs (job_id, lease_generation);

CREATE TABLE fault_transitions (
    job_id           uuid NOT NULL,
    queue            text NOT NULL,
    from_state       text NOT NULL,
    to_state         text NOT NULL,
    lease_generation bigint NOT NULL,
    error_code       text,
    -- The changing transaction's start: compared with pause windows.
    at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fault_transitions_job_idx ON fault_transitions (job_id, lease_generation);

-- When each queue was paused, by the database's clock.
CREATE TABLE fault_pauses (
    queue            text NOT NULL,
    from_at          timestamptz NOT NULL,
    to_at            timestamptz NOT NULL
);

CREATE FUNCTION fault_record_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fault_transitions (job_id, queue, from_state, to_state, lease_generation, error_code)
    VALUES (NEW.job_id, NEW.queue, OLD.state, NEW.state, NEW.lease_generation, NEW.last_error_code);
    RETURN NULL;
END;
$$;

CREATE TRIGGER fault_record_transition
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION fault_record_transition();
"#;

/// One check: what it asserts, how many rows break it, a few of them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) violations: i64,
    pub(crate) examples: Vec<String>,
}

impl Check {
    pub(crate) fn passed(&self) -> bool {
        self.violations == 0
    }
}

/// What the scenario expects, for the checks that compare with it.
pub(crate) struct Expected<'a> {
    /// The dedup key of every job it enqueued.
    pub(crate) keys: &'a [String],
    /// The keys of the jobs meant to fail (fatally).
    pub(crate) fatal_keys: &'a [String],
}

/// Each check is one query returning the rows that break it as text.
const CHECKS: &[(&str, &str)] = &[
    (
        "every enqueued job is present",
        "SELECT k FROM unnest($1::text[]) AS k
         WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_type = $3 AND j.dedup_key = k)",
    ),
    (
        "no job that was not enqueued",
        "SELECT job_id::text || ' ' || coalesce(dedup_key, '(no key)') FROM jobs
         WHERE job_type <> $3 OR dedup_key IS NULL
            OR dedup_key NOT IN (SELECT unnest($1::text[]))",
    ),
    (
        "every job terminal",
        "SELECT dedup_key || ' ' || state FROM jobs
         WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')",
    ),
    (
        "every job ended as planned",
        "SELECT dedup_key || ' ' || state || ' ' || coalesce(last_error_code, '') FROM jobs
         WHERE (state = 'FAILED') <> (dedup_key IN (SELECT unnest($2::text[])))
            OR state NOT IN ('SUCCEEDED', 'FAILED')
            OR (state = 'FAILED' AND last_error_code IS DISTINCT FROM 'FAULT_FATAL')",
    ),
    (
        "FAILED rows carry an error code",
        "SELECT dedup_key FROM jobs WHERE state = 'FAILED' AND last_error_code IS NULL",
    ),
    (
        "no lease outside RUNNING / CANCEL_REQUESTED",
        "SELECT dedup_key || ' ' || state FROM jobs
         WHERE state NOT IN ('RUNNING', 'CANCEL_REQUESTED')
           AND (lease_owner IS NOT NULL OR lease_expires_at IS NOT NULL)",
    ),
    (
        "attempt_count <= max_attempts",
        "SELECT dedup_key || ' ' || attempt_count || '/' || max_attempts FROM jobs
         WHERE attempt_count > max_attempts",
    ),
    (
        "no job completed twice",
        "SELECT job_id::text || ' ' || count(*) FROM fault_transitions
         WHERE to_state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
         GROUP BY job_id HAVING count(*) > 1",
    ),
    (
        "one row per dedup key",
        "SELECT dedup_key || ' x' || count(*) FROM jobs
         WHERE dedup_key IS NOT NULL GROUP BY job_type, dedup_key HAVING count(*) > 1",
    ),
    (
        "outbox drained",
        "SELECT id || ' ' || topic FROM job_outbox",
    ),
    (
        "nothing moved to job_outbox_dead",
        "SELECT id || ' ' || topic || ' ' || coalesce(last_error, '') FROM job_outbox_dead",
    ),
    (
        "no side effect twice under one lease",
        "SELECT job_id::text || ' generation ' || lease_generation || ' x' || count(*)
         FROM handler_runs GROUP BY job_id, lease_generation HAVING count(*) > 1",
    ),
    (
        "every re-run explained by a lost or failed attempt",
        // A run followed by a later one must have ended without success:
        // its lease left RUNNING for a claimable state (a retry, or the
        // sweeper taking back an expired lease).
        "SELECT r.job_id::text || ' generation ' || r.lease_generation FROM handler_runs r
         WHERE EXISTS (SELECT 1 FROM handler_runs later
                       WHERE later.job_id = r.job_id AND later.lease_generation > r.lease_generation)
           AND NOT EXISTS (SELECT 1 FROM fault_transitions t
                           WHERE t.job_id = r.job_id AND t.lease_generation = r.lease_generation
                             AND t.from_state IN ('RUNNING', 'CANCEL_REQUESTED')
                             AND t.to_state IN ('QUEUED', 'RETRY_WAIT'))",
    ),
    (
        "every success ran its handler under the final lease",
        "SELECT j.dedup_key FROM jobs j
         WHERE j.state = 'SUCCEEDED'
           AND NOT EXISTS (SELECT 1 FROM handler_runs r
                           WHERE r.job_id = j.job_id AND r.lease_generation = j.lease_generation)",
    ),
    (
        "a paused queue claimed nothing",
        "SELECT t.queue || ' ' || t.job_id::text || ' at ' || t.at FROM fault_transitions t
         JOIN fault_pauses p ON p.queue = t.queue
         WHERE t.to_state = 'RUNNING' AND t.at >= p.from_at AND t.at <= p.to_at",
    ),
];

/// Run every check against the scenario's database.
pub(crate) async fn run_checks(pool: &PgPool, expected: &Expected<'_>) -> Result<Vec<Check>> {
    let mut checks = Vec::with_capacity(CHECKS.len());
    for (name, query) in CHECKS {
        // Every query takes the same parameters; each uses those it needs.
        let wrapped = format!(
            "WITH broken(detail) AS ({query}), unused AS (SELECT $1::text[], $2::text[], $3::text) \
             SELECT (SELECT count(*) FROM broken), \
                    ARRAY(SELECT detail::text FROM broken LIMIT 5)"
        );
        let (violations, examples): (i64, Vec<String>) =
            sqlx::query_as(sqlx::AssertSqlSafe(wrapped))
                .bind(expected.keys)
                .bind(expected.fatal_keys)
                .bind(JOB_TYPE)
                .fetch_one(pool)
                .await?;
        checks.push(Check {
            name: (*name).to_owned(),
            violations,
            examples,
        });
    }
    Ok(checks)
}
