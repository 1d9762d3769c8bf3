//! The `jobwire` binary against a real PostgreSQL: the demo, a worker killed
//! with SIGKILL mid-job, and bad input at the command line.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use jobwire_core::JobState;
use jobwire_test_support::{
    FreshDatabase, StopOnDrop, enqueue_ids, wait_for_all_finished, wait_for_count,
};
use sqlx::PgPool;
use uuid::Uuid;

const JOBWIRE: &str = env!("CARGO_BIN_EXE_jobwire");

fn jobwire(url: &str, args: &[&str]) -> Output {
    Command::new(JOBWIRE)
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// A long-running `jobwire` process (a worker), its output discarded,
/// stopped when dropped.
fn start(url: &str, args: &[&str]) -> StopOnDrop {
    Command::new(JOBWIRE)
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(StopOnDrop)
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Assert that a command's output says `needle`, showing the output if not.
fn assert_says(output: &str, needle: &str) {
    assert!(output.contains(needle), "expected {needle:?} in:\n{output}");
}

/// A fresh database with the schema, and a pool on it.
async fn migrated_database() -> (FreshDatabase, PgPool) {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let pool = db.pool().await;
    (db, pool)
}

#[tokio::test]
async fn the_demo_runs_to_completion_on_every_path() {
    for path in ["postgres", "rabbitmq", "sqs", "kafka"] {
        let db = FreshDatabase::create().await;
        let output = jobwire(&db.url, &["demo", "--transport", path]);
        let out = stdout(&output);
        assert!(
            output.status.success(),
            "{path}: {out}\n{}",
            stderr(&output)
        );
        assert!(out.contains("every job ended as expected"), "{path}: {out}");
        if path != "postgres" {
            assert!(out.contains("wake-ups published"), "{path}: {out}");
        }
        db.drop_database().await;
    }
}

#[tokio::test]
async fn the_demo_runs_to_completion_on_a_fresh_database() {
    let db = FreshDatabase::create().await;
    // No --transport: the embedded in-memory broker.
    let output = jobwire(&db.url, &["demo"]);
    let out = stdout(&output);
    assert!(output.status.success(), "{out}\n{}", stderr(&output));
    assert!(out.contains("every job ended as expected"), "{out}");
    assert!(out.contains("broker path over memory"), "{out}");
    for line in [
        "flaky webhook (fails twice)",
        "poison job (always fails)",
        "long export (cancelled)",
        "reminder (delayed 2 s)",
        "job type no worker knows",
        "acme import row 6 (cap 2)",
        "globex report (after the import)",
    ] {
        let row = out
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no row for {line}: {out}"));
        assert!(row.ends_with("yes"), "{row}");
    }
    // The tenants' part: the import held to its cap while the report ran,
    // and the enqueue over a limit refused with nothing written.
    assert!(out.contains("tenants: acme's import finished"), "{out}");
    assert!(
        out.contains("enqueue limit: initech may have 3 jobs waiting; 4 jobs in one statement were refused whole (QUEUE_FULL"),
        "{out}"
    );
    // The table agrees with what the demo printed.
    let pool = db.pool().await;
    let initech: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE tenant = 'initech'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(initech, 0);
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM jobs GROUP BY 1 ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        vec![
            ("CANCELLED".into(), 1),
            ("FAILED".into(), 3),
            ("SUCCEEDED".into(), 15)
        ]
    );
    pool.close().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_killed_workers_job_is_reclaimed_after_its_lease_and_completes() {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let enqueue = jobwire(
        &db.url,
        &[
            "enqueue",
            "sleep",
            "--payload",
            r#"{"ms": 2500}"#,
            "--queue",
            "killq",
        ],
    );
    assert!(enqueue.status.success(), "{}", stderr(&enqueue));
    let job_id: Uuid = stdout(&enqueue).trim().parse().unwrap();
    let pool = db.pool().await;

    // Worker A takes the job, and is killed without a chance to say anything.
    let mut victim = start(
        &db.url,
        &[
            "worker",
            "--queue",
            "killq=2",
            "--lease-ms",
            "1500",
            "--no-sweeper",
            "--worker-id",
            "victim",
        ],
    );
    let held = jobwire_tests_wait(&pool, job_id, |s, owner| {
        s == JobState::Running && owner.as_deref() == Some("victim")
    })
    .await;
    assert_eq!(held.1, 1);
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();

    // Worker B sweeps the lapsed lease and runs the job again.
    let mut rescuer = start(
        &db.url,
        &[
            "worker",
            "--queue",
            "killq=2",
            "--lease-ms",
            "1500",
            "--sweep-interval-ms",
            "200",
            "--worker-id",
            "rescuer",
        ],
    );
    let done = jobwire_tests_wait(&pool, job_id, |s, _| s.is_terminal()).await;
    rescuer.kill().unwrap();
    rescuer.wait().unwrap();

    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(done.0, JobState::Succeeded);
    assert_eq!(status.attempt_count, 2, "the killed attempt counts");
    assert_eq!(status.lease_generation.0, 2);
    assert_eq!(status.last_error_code.as_deref(), Some("LEASE_EXPIRED"));
    assert!(status.last_error.unwrap().contains("victim"));
    pool.close().await;
    db.drop_database().await;
}

/// Poll until `done(state, lease_owner)`; returns (state, attempt_count).
async fn jobwire_tests_wait(
    pool: &PgPool,
    job_id: Uuid,
    done: impl Fn(JobState, Option<String>) -> bool,
) -> (JobState, i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = jobwire_core::job_status(pool, job_id).await.unwrap();
        if done(status.state, status.lease_owner.clone()) {
            return (status.state, status.attempt_count);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job stuck: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn the_cli_enqueues_reports_and_cancels() {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let enqueued = jobwire(
        &db.url,
        &[
            "enqueue",
            "noop",
            "--payload",
            r#"{"user": 7}"#,
            "--delay-ms",
            "60000",
            "--dedup-key",
            "u7",
            "--tenant",
            "acme",
            "--json",
        ],
    );
    assert!(enqueued.status.success(), "{}", stderr(&enqueued));
    let enqueued: serde_json::Value = serde_json::from_slice(&enqueued.stdout).unwrap();
    assert_eq!(enqueued["duplicate"], false);
    let job_id = enqueued["job_id"].as_str().unwrap().to_owned();

    let again = jobwire(&db.url, &["enqueue", "noop", "--dedup-key", "u7"]);
    assert_eq!(stdout(&again).trim(), job_id);
    assert!(stderr(&again).contains("duplicate"));

    let status = jobwire(&db.url, &["status", &job_id, "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["state"], "QUEUED");
    assert_eq!(status["payload"]["user"], 7);
    let human = stdout(&jobwire(&db.url, &["status", &job_id]));
    assert!(
        human.contains("state      QUEUED")
            && human.contains("next run")
            && human.contains("tenant     acme"),
        "{human}"
    );
    // `null` is no payload: the default `{}`.
    let null_payload = jobwire(&db.url, &["enqueue", "noop", "--payload", "null", "--json"]);
    assert!(null_payload.status.success(), "{}", stderr(&null_payload));
    let null_payload: serde_json::Value = serde_json::from_slice(&null_payload.stdout).unwrap();
    let stored = jobwire(
        &db.url,
        &["status", null_payload["job_id"].as_str().unwrap(), "--json"],
    );
    let stored: serde_json::Value = serde_json::from_slice(&stored.stdout).unwrap();
    assert_eq!(stored["payload"], serde_json::json!({}));
    // Numbers a 64-bit integer or a double holds are stored as written.
    let numbers = r#"{"n": 18446744073709551615, "f": 0.30000000000000004}"#;
    let exact = jobwire(
        &db.url,
        &["enqueue", "noop", "--payload", numbers, "--json"],
    );
    assert!(exact.status.success(), "{}", stderr(&exact));
    let exact: serde_json::Value = serde_json::from_slice(&exact.stdout).unwrap();
    let pool = db.pool().await;
    let stored: String =
        sqlx::query_scalar("SELECT payload::text FROM jobs WHERE job_id = $1::text::uuid")
            .bind(exact["job_id"].as_str().unwrap())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        r#"{"f": 0.30000000000000004, "n": 18446744073709551615}"#
    );
    pool.close().await;

    let cancel = jobwire(&db.url, &["cancel", &job_id]);
    assert!(stdout(&cancel).contains("cancelled"), "{}", stdout(&cancel));
    let cancel_again = jobwire(&db.url, &["cancel", &job_id]);
    assert!(!cancel_again.status.success());
    assert_says(&stderr(&cancel_again), "already finished as CANCELLED");
    db.drop_database().await;
}

/// Help names the variable the database URL comes from, never its value:
/// a URL holds the password, and help gets pasted into tickets.
#[test]
fn help_never_shows_the_database_url() {
    let secret = "postgres://app:s3cret-pw@db.internal:5432/jobs";
    for args in [&["--help"][..], &["token", "--help"], &["worker", "--help"]] {
        let output = jobwire(secret, args);
        assert!(output.status.success(), "{args:?}");
        let help = stdout(&output);
        assert!(help.contains("DATABASE_URL"), "{args:?}: {help}");
        assert!(
            !help.contains("s3cret-pw"),
            "{args:?} shows the password: {help}"
        );
    }
}

#[tokio::test]
async fn bad_command_line_input_gets_a_clear_error_and_writes_nothing() {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let cases: [(&[&str], &str); 30] = [
        (
            &["serve", "--metrics-interval-ms", "20000"],
            "20000 is not in 1..=10000",
        ),
        (
            &["enqueue", "noop", "--payload", r#"{"a": "\u0000"}"#],
            "holds \\u0000 (NUL), which PostgreSQL's jsonb cannot store",
        ),
        (
            &["enqueue", "noop", "--run-at", "2030-01-01T00:00:00"],
            "not an RFC 3339 time with an offset",
        ),
        (
            &["replay", "--since", "yesterday"],
            "write it like 2030-01-01T09:00:00Z",
        ),
        (
            &["enqueue", "noop", "--delay-ms", "-5"],
            "must not be negative",
        ),
        (
            &["enqueue", "noop", "--payload", "{not json"],
            "not valid JSON",
        ),
        (
            &[
                "enqueue",
                "noop",
                "--payload",
                r#"{"id": 123456789012345678901234567890}"#,
            ],
            "the number 123456789012345678901234567890, which would be stored as another",
        ),
        (&["enqueue", ""], "must not be empty"),
        (&["enqueue", "noop", "--max-attempts", "0"], "at least 1"),
        (
            &["status", "01a226f7-0000-7000-8000-000000000000"],
            "not found",
        ),
        (&["status", "nope"], "\"nope\" is not a job id: a UUID"),
        (
            &[
                "schedule",
                "put",
                "nightly",
                "--cron",
                "0 2 * * *",
                "--type",
                "report",
                "--jitter-seconds",
                "-1",
            ],
            "-1 is not in 0..=86400",
        ),
        (
            &[
                "schedule",
                "put",
                "nightly",
                "--cron",
                "0 2 * * *",
                "--type",
                "report",
                "--max-catch-up",
                "0",
            ],
            "0 is not in 1..=10000",
        ),
        // The library's verdicts name the flag, not its argument's name.
        (
            &[
                "schedule",
                "put",
                "nightly",
                "--cron",
                "0 2 * * *",
                "--type",
                "report",
                "--max-attempts",
                "0",
            ],
            "invalid --max-attempts: must be at least 1",
        ),
        (
            &[
                "queue",
                "limit",
                "imports",
                "--max-queued",
                "5",
                "--shed-depth",
                "7",
                "--shed-priority",
                "0",
            ],
            "invalid --shed-depth: 7 is not below",
        ),
        (
            &["enqueue", "noop", "--tenant", "acme", "--queue", " "],
            "queue",
        ),
        // A group replay that matches nothing says so and fails, as an
        // outbox replay does; so do bounds no job can fall within.
        (
            &["replay", "--job-type", "nosuch"],
            "no dead letter matches --job-type/--error-code",
        ),
        (
            &[
                "replay",
                "--job-type",
                "report",
                "--since",
                "2030-01-01T00:00:00Z",
                "--until",
                "2020-01-01T00:00:00Z",
            ],
            "is after --until",
        ),
        (
            &["replay", "--job-type", "report", "--limit", "0"],
            "0 is not at least 1 (leave --limit out",
        ),
        (
            &["outbox", "replay", "--id", "abc"],
            "\"abc\" is not an outbox row id",
        ),
        // A negative number is a bad value of its flag, not a flag nobody
        // defined (clap's "unexpected argument '-5'").
        (
            &["worker", "--lease-ms", "-5"],
            "invalid value '-5' for '--lease-ms <LEASE_MS>'",
        ),
        (
            &["relay", "--poll-ms", "-1"],
            "invalid value '-1' for '--poll-ms <POLL_MS>'",
        ),
        // Values past what a clock or a statement can hold: each used to
        // panic, or to fail every pass in silence.
        (
            &["enqueue", "noop", "--delay-ms", "9000000000000000"],
            "invalid --delay-ms: must make the job due before the year 10000",
        ),
        (
            &["enqueue", "noop", "--delay-ms=-9223372036854775808"],
            "invalid --delay-ms: must not be negative",
        ),
        (
            &["relay", "--batch-size", "18446744073709551615"],
            "must be at most 100000",
        ),
        // From a new operator's trial: settings a worker took and then
        // stalled on, or ran with, making no sense.
        (
            &["worker", "--pool-size", "1"],
            "--pool-size 1 is too small for jobwire worker",
        ),
        (
            &["worker", "--queue", "default", "--queue", "default=2"],
            "queue \"default\" is given twice",
        ),
        (
            &[
                "worker",
                "--backoff-base-ms",
                "1000",
                "--backoff-max-ms",
                "10",
            ],
            "--backoff-max-ms 10 is below --backoff-base-ms 1000",
        ),
        (
            &["serve", "--pool-size", "1"],
            "--pool-size 1 is too small for jobwire serve",
        ),
        (
            &["enqueue", "noop", "--run-at", "10000-01-01T00:00:00Z"],
            "has a year of more than four digits: a job is due before the year 10000",
        ),
    ];
    for (args, message) in cases {
        let output = jobwire(&db.url, args);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&output).contains(message),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // A mistake is one line, even where the shell keeps RUST_BACKTRACE set.
    let with_backtrace = Command::new(JOBWIRE)
        .args(["status", "01a226f7-0000-7000-8000-000000000000"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!with_backtrace.status.success());
    assert_eq!(
        stderr(&with_backtrace).trim_end().lines().count(),
        1,
        "{}",
        stderr(&with_backtrace)
    );
    let pool = db.pool().await;
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
    let schedules: i64 = sqlx::query_scalar("SELECT count(*) FROM job_schedules")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(schedules, 0);
    pool.close().await;

    // Refused once, before the worker starts or declares anything.
    let worker = refused(&db.url, &["worker", "--lease-ms", "0"]).await;
    assert!(!worker.status.success());
    assert_says(
        &stderr(&worker),
        "from 300 ms to 86400000 ms (a day), got 0 ms",
    );
    assert_eq!(
        stderr(&worker).matches("300 ms").count(),
        1,
        "{}",
        stderr(&worker)
    );
    // A lease of centuries claimed jobs with an end no client could read.
    let worker = refused(&db.url, &["worker", "--lease-ms", "9000000000000000"]).await;
    assert!(!worker.status.success());
    assert_says(&stderr(&worker), "got 9000000000000000 ms");

    let not_postgres = jobwire("mysql://root@127.0.0.1:5432/none", &["migrate"]);
    assert!(!not_postgres.status.success());
    assert_says(&stderr(&not_postgres), "is not a PostgreSQL URL");

    let unreachable = jobwire("postgres://postgres@127.0.0.1:1/none", &["migrate"]);
    assert!(!unreachable.status.success());
    // The database's own answer, not a pool timeout.
    let said = stderr(&unreachable);
    assert!(said.contains("cannot connect to PostgreSQL"), "{said}");
    assert!(said.to_lowercase().contains("refused"), "{said}");
    assert!(!said.contains("pool timed out"), "{said}");

    let base = db.url.rsplit_once('/').unwrap().0;
    let no_database = jobwire(&format!("{base}/jobwire_no_such_database"), &["migrate"]);
    assert!(!no_database.status.success());
    let said = stderr(&no_database);
    assert!(said.contains("does not exist"), "{said}");
    // Said once, without the server's source line.
    assert_eq!(said.matches("does not exist").count(), 1, "{said}");
    assert!(!said.contains("at line"), "{said}");
    db.drop_database().await;
}

#[tokio::test]
async fn a_database_without_the_schema_says_to_run_migrate() {
    let db = FreshDatabase::create().await;
    let status = jobwire(&db.url, &["status", "0190f0e4-0000-7000-8000-000000000000"]);
    assert!(!status.status.success());
    let said = stderr(&status);
    assert!(said.contains("run `jobwire migrate`"), "{said}");

    // Workers and relays never migrate: they refuse and say what to run.
    let worker = jobwire(&db.url, &["worker"]);
    assert!(!worker.status.success());
    let said = stderr(&worker);
    assert!(said.contains("run `jobwire migrate` first"), "{said}");
    let pool = db.pool().await;
    let schema: bool = sqlx::query_scalar("SELECT to_regclass('jobs') IS NOT NULL")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!schema, "the worker must not have created the schema");

    // `migrate` says what it did: everything the first time, nothing after.
    let first = jobwire(&db.url, &["migrate"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let said = stdout(&first);
    let total = jobwire_core::MIGRATOR.iter().count();
    assert!(
        said.contains(&format!("created the schema ({total} migrations)")),
        "{said}"
    );
    let again = stdout(&jobwire(&db.url, &["migrate"]));
    assert!(
        again.contains("already up to date; nothing applied"),
        "{again}"
    );
    pool.close().await;
    db.drop_database().await;
}

/// `jobwire tenant set|list` and `enqueue --tenant`: caps set and shown,
/// bad input refused with a message and nothing written.
#[tokio::test]
async fn tenant_caps_from_the_command_line() {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let set = jobwire(&db.url, &["tenant", "set", "imports", "--max-running", "3"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert_says(&stdout(&set), "every tenant runs at most 3");
    let set = jobwire(
        &db.url,
        &[
            "tenant",
            "set",
            "imports",
            "--tenant",
            "bigco",
            "--max-running",
            "10",
        ],
    );
    assert!(set.status.success(), "{}", stderr(&set));
    let enqueued = jobwire(
        &db.url,
        &[
            "enqueue",
            "import_row",
            "--queue",
            "imports",
            "--tenant",
            "bigco",
        ],
    );
    assert!(enqueued.status.success(), "{}", stderr(&enqueued));

    let list = jobwire(&db.url, &["tenant", "list", "imports", "--json"]);
    assert!(list.status.success(), "{}", stderr(&list));
    let caps: serde_json::Value = serde_json::from_str(&stdout(&list)).unwrap();
    assert_eq!(caps["default_max_running"], 3);
    assert_eq!(caps["tenants"][0]["tenant"], "bigco");
    assert_eq!(caps["tenants"][0]["max_running"], 10);
    // One naming throughout, the nested limits too.
    assert_eq!(caps["tenants"][0]["limits"]["max_running"], 10);
    assert_eq!(caps["tenants"][0]["waiting"], 1);
    let text = stdout(&jobwire(&db.url, &["tenant", "list", "imports"]));
    // The cap in force, marked as the tenant's own.
    assert!(
        text.contains("bigco") && text.contains("at most 10 running (own)"),
        "{text}"
    );

    // Refused, with a message, and nothing changed.
    for (args, says) in [
        (
            vec!["tenant", "set", "imports", "--max-running", "0"],
            "at least 1",
        ),
        (
            vec!["tenant", "set", "imports", "--max-running", "-1"],
            "at least 1",
        ),
        (vec!["tenant", "set", "imports"], "--max-running"),
        (
            vec![
                "tenant",
                "set",
                "imports",
                "--tenant",
                " ",
                "--max-running",
                "2",
            ],
            "tenant",
        ),
        (vec!["enqueue", "import_row", "--tenant", ""], "tenant"),
    ] {
        let refused = jobwire(&db.url, &args);
        assert!(!refused.status.success(), "{args:?} was accepted");
        assert!(
            stderr(&refused).contains(says),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
    let caps: serde_json::Value = serde_json::from_str(&stdout(&jobwire(
        &db.url,
        &["tenant", "list", "imports", "--json"],
    )))
    .unwrap();
    assert_eq!(caps["default_max_running"], 3);
    assert_eq!(caps["tenants"].as_array().unwrap().len(), 1);

    let removed = jobwire(&db.url, &["tenant", "set", "imports", "--remove"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert_says(
        &stdout(&removed),
        "no default cap on running jobs for its tenants now",
    );
    // An override removed falls back to the default.
    let fallback = jobwire(
        &db.url,
        &["tenant", "set", "imports", "--tenant", "bigco", "--remove"],
    );
    assert!(fallback.status.success(), "{}", stderr(&fallback));
    assert_says(
        &stdout(&fallback),
        "tenant \"bigco\" has no cap on running jobs of its own now",
    );
    db.drop_database().await;
}

#[tokio::test]
async fn enqueue_limits_from_the_command_line() {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let set = jobwire(&db.url, &["queue", "limit", "imports", "--max-queued", "2"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert_says(&stdout(&set), "at most 2 job(s) waiting");
    let set = jobwire(
        &db.url,
        &[
            "tenant",
            "set",
            "other",
            "--tenant",
            "acme",
            "--enqueue-rate",
            "1/h",
            "--max-queued",
            "5",
        ],
    );
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(stdout(&set).contains("at most 1/h"), "{}", stdout(&set));

    let enqueue = |queue: &str| {
        jobwire(
            &db.url,
            &[
                "enqueue",
                "import_row",
                "--queue",
                queue,
                "--tenant",
                "acme",
            ],
        )
    };
    for _ in 0..2 {
        let ok = enqueue("imports");
        assert!(ok.status.success(), "{}", stderr(&ok));
    }
    // A refusal by a limit exits 75 (try again later), not 1, so a
    // script can tell it from any other failure.
    let full = enqueue("imports");
    assert_eq!(full.status.code(), Some(75), "{}", stderr(&full));
    assert!(stderr(&full).contains("is full"), "{}", stderr(&full));
    assert!(stderr(&full).contains("retry after"), "{}", stderr(&full));
    assert!(enqueue("other").status.success());
    let limited = enqueue("other");
    assert_eq!(limited.status.code(), Some(75), "{}", stderr(&limited));
    assert_says(&stderr(&limited), "enqueue rate of 1 job(s) per 3600 s");
    let unknown = jobwire(&db.url, &["enqueue", "import_row", "--priority", "x"]);
    assert_eq!(unknown.status.code(), Some(2), "a usage error stays 2");

    // Nothing was written by a refusal.
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 3);

    // The queue drains: one job claimed, the next enqueue gets in.
    let claimed =
        jobwire_core::claim_batch(&pool, "imports", "w", 1, std::time::Duration::from_secs(60))
            .await
            .unwrap();
    assert_eq!(claimed.len(), 1);
    let ok = enqueue("imports");
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(enqueue("imports").status.code(), Some(75), "full again");

    // Shown, changed one at a time, removed.
    let shown = jobwire(&db.url, &["queue", "limits", "imports", "--json"]);
    let limits: serde_json::Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(limits["queue"], "imports");
    assert_eq!(limits["max_queued"], 2);
    let listed = stdout(&jobwire(&db.url, &["tenant", "list", "other"]));
    assert!(
        listed.contains("acme") && listed.contains("enqueues at most 1/h (own)"),
        "{listed}"
    );
    let shed = jobwire(
        &db.url,
        &[
            "queue",
            "limit",
            "imports",
            "--shed-depth",
            "1",
            "--shed-priority",
            "-1",
        ],
    );
    assert!(shed.status.success(), "{}", stderr(&shed));
    assert_says(&stdout(&shed), "priority -1 or more urgent");
    assert!(
        stdout(&shed).contains("at most 2"),
        "the cap stays: {}",
        stdout(&shed)
    );
    for (args, says) in [
        (vec!["queue", "limit", "imports"], "give a limit"),
        (
            vec!["queue", "limit", "imports", "--max-queued", "0"],
            "at least 1",
        ),
        (
            vec!["queue", "limit", "imports", "--max-queued", "1000000001"],
            "'--max-queued <N|none>': at most 1000000000",
        ),
        // Shedding from the cap's depth on would never refuse anything.
        (
            vec!["queue", "limit", "imports", "--shed-depth", "2"],
            "2 is not below the queue's cap on waiting jobs (2)",
        ),
        (
            vec!["tenant", "set", "q", "--enqueue-rate", "5/week"],
            "not a window",
        ),
        (
            vec!["tenant", "set", "q", "--enqueue-rate", "0/s"],
            "at least 1 job",
        ),
        (
            vec![
                "token", "create", "t", "--scope", "admin", "--tenant", "acme",
            ],
            "never admin",
        ),
    ] {
        let refused = jobwire(&db.url, &args);
        assert!(!refused.status.success(), "{args:?} was accepted");
        assert!(
            stderr(&refused).contains(says),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
    let removed = jobwire(&db.url, &["queue", "limit", "imports", "--remove"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert!(enqueue("imports").status.success(), "room again");

    let token = jobwire(
        &db.url,
        &[
            "token", "create", "acme-app", "--scope", "write", "--tenant", "acme",
        ],
    );
    assert!(token.status.success(), "{}", stderr(&token));
    assert_says(&stderr(&token), "bound to tenant \"acme\"");
    let listed = stdout(&jobwire(&db.url, &["token", "list"]));
    assert!(listed.contains("tenant \"acme\""), "{listed}");
    pool.close().await;
    db.drop_database().await;
}

/// A running job whose lease has expired still names its owner until a
/// sweeper sets it back: `status` says so, for the runbook that sends an
/// operator there (JobwireLeasesNotSwept).
#[tokio::test]
async fn status_says_a_lease_has_expired_and_waits_for_the_sweeper() {
    let (db, pool) = migrated_database().await;
    let job_id: Uuid = sqlx::query_scalar(
        "INSERT INTO jobs (job_id, job_type, state, attempt_count, lease_generation,
                           lease_owner, lease_expires_at, heartbeat_at)
         VALUES (jobwire_uuidv7(), 'slow', 'RUNNING', 1, 1, 'worker-gone',
                 now() - interval '90 seconds', now() - interval '120 seconds')
         RETURNING job_id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let human = stdout(&jobwire(&db.url, &["status", &job_id.to_string()]));
    assert_says(&human, "not swept yet");
    assert_says(&human, "worker-gone, generation 1");
    pool.close().await;
    db.drop_database().await;
}

/// Text from jobs reaches the operator's terminal with its control
/// characters escaped: a handler's error (an upstream's response, say) or
/// a name stored before such names were refused cannot retitle, clear or
/// rewrite the terminal, nor break a listing's lines.
#[tokio::test]
async fn text_from_jobs_cannot_drive_the_terminal() {
    let (db, pool) = migrated_database().await;
    // Written as a row: the enqueue refuses such names now.
    let job_id: Uuid = sqlx::query_scalar(
        "INSERT INTO jobs (job_id, queue, job_type, tenant, state, attempt_count, finished_at,
                           last_error_code, last_error)
         VALUES (jobwire_uuidv7(), E'imports\\x1b[2J', E'parse\\x07', E'acme\\x1b]0;owned\\x07',
                 'FAILED', 1, now(), E'HTTP\\x1b[31m500', E'upstream said:\\n\\x1b[1Aall is well\\u009b2J')
         RETURNING job_id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let shown = [
        stdout(&jobwire(&db.url, &["status", &job_id.to_string()])),
        stdout(&jobwire(&db.url, &["dead-letters"])),
        stdout(&jobwire(&db.url, &["queue", "list"])),
    ];
    for text in &shown {
        assert!(
            !text.contains(['\u{1b}', '\u{7}']),
            "a raw control character in:\n{text:?}"
        );
    }
    let [status, dead_letters, queues] = &shown;
    assert_says(
        status,
        r"type       parse\u{7} (queue imports\u{1b}[2J, priority 0)",
    );
    assert_says(status, r"tenant     acme\u{1b}]0;owned\u{7}");
    assert_says(
        status,
        r"last error HTTP\u{1b}[31m500: upstream said:\n\u{1b}[1Aall is well\u{9b}2J",
    );
    assert_says(dead_letters, r"parse\u{7}");
    assert_says(dead_letters, r"HTTP\u{1b}[31m500");
    assert_says(queues, r"imports\u{1b}[2J");
    // `--json` escapes them as JSON, DEL and C1 (U+009B, a CSI) included.
    let id = job_id.to_string();
    for (args, escaped) in [
        (vec!["status", "--json", &id], r"all is well\u009b2J"),
        (vec!["dead-letters", "--json"], r"parse\u0007"),
        (vec!["queue", "list", "--json"], r"imports\u001b[2J"),
    ] {
        let json = stdout(&jobwire(&db.url, &args));
        assert!(
            !json.chars().any(|c| c.is_control() && c != '\n'),
            "a raw control character in {args:?}:\n{json:?}"
        );
        assert_says(&json, escaped);
        serde_json::from_str::<serde_json::Value>(&json).unwrap();
    }
    pool.close().await;
    db.drop_database().await;
}

#[tokio::test]
async fn dead_letters_are_listed_and_replayed_from_the_command_line() {
    let (db, pool) = migrated_database().await;
    let failed: Uuid = sqlx::query_scalar(
        "INSERT INTO jobs (job_id, job_type, state, attempt_count, finished_at, last_error_code, last_error)
         VALUES (jobwire_uuidv7(), 'deliver_webhook', 'FAILED', 1, now(), 'HTTP_503', 'upstream said 503')
         RETURNING job_id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job_outbox_dead (id, topic, payload, headers, available_at, attempts, last_error, created_at)
         VALUES (41, 'jobwire-webhooks', '{}', '{}', now(), 10, 'broker refused', now()),
                (42, 'jobwire-webhooks', '{}', '{}', now(), 10,
                 'message rejected: message of 300071 bytes exceeds the limit of 262144 bytes', now())",
    )
    .execute(&pool)
    .await
    .unwrap();

    // Jobs: the same groups as text and as JSON.
    let text = jobwire(&db.url, &["dead-letters"]);
    assert!(text.status.success(), "{}", stderr(&text));
    assert!(
        stdout(&text).contains("deliver_webhook")
            && stdout(&text).contains("HTTP_503")
            && stdout(&text).contains("newest error: upstream said 503")
            && stdout(&text).starts_with("   JOBS  TYPE")
            && stdout(&text).contains(
                "replay: jobwire replay --job-type=deliver_webhook --error-code=HTTP_503"
            ),
        "{}",
        stdout(&text)
    );
    let json = jobwire(&db.url, &["dead-letters", "--json"]);
    let groups: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(groups[0]["job_type"], "deliver_webhook");
    assert_eq!(groups[0]["last_error_code"], "HTTP_503");
    assert_eq!(groups[0]["jobs"], 1);
    let replayed = jobwire(&db.url, &["replay", "--job-type", "deliver_webhook"]);
    assert!(replayed.status.success(), "{}", stderr(&replayed));
    assert!(
        stdout(&replayed).starts_with("1 job replayed"),
        "{}",
        stdout(&replayed)
    );
    let state: String = sqlx::query_scalar("SELECT state::text FROM jobs WHERE job_id = $1")
        .bind(failed)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(state, "QUEUED");

    // Outbox rows: an id that is no dead letter is an error naming it, and
    // the one that is moves back all the same.
    let json = jobwire(&db.url, &["outbox", "dead-letters", "--json"]);
    let groups: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(groups[0]["topic"], "jobwire-webhooks");
    assert_eq!(groups[0]["count"], 1);
    let listed = stdout(&jobwire(&db.url, &["outbox", "dead-letters"]));
    let today = chrono::Utc::now().format("%Y-%m-%d ").to_string();
    assert_says(&listed, &today);
    // An empty --error would match every row of the topic: refused, and
    // nothing moves.
    let blank = jobwire(
        &db.url,
        &[
            "outbox",
            "replay",
            "--topic",
            "jobwire-webhooks",
            "--error",
            "",
        ],
    );
    assert!(!blank.status.success(), "an empty --error was accepted");
    assert_says(&stderr(&blank), "--error must not be empty");
    let still_dead: i64 = sqlx::query_scalar("SELECT count(*) FROM job_outbox_dead")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(still_dead, 2);
    // A group is named by its error's first words as well as by the whole
    // error; a group that matches nothing is an error.
    let by_words = jobwire(
        &db.url,
        &[
            "outbox",
            "replay",
            "--topic",
            "jobwire-webhooks",
            "--error",
            "message rejected",
        ],
    );
    assert!(by_words.status.success(), "{}", stderr(&by_words));
    assert_says(&stdout(&by_words), "1 outbox row moved back");
    let nothing = jobwire(
        &db.url,
        &[
            "outbox",
            "replay",
            "--topic",
            "jobwire-webhooks",
            "--error",
            "message too large",
        ],
    );
    assert!(!nothing.status.success(), "a replay of nothing succeeded");
    assert_says(
        &stderr(&nothing),
        "no outbox dead letter matches --topic/--error",
    );
    assert_eq!(stdout(&nothing), "", "a second answer beside the error");
    let blank = jobwire(&db.url, &["outbox", "replay", "--topic", " "]);
    assert!(!blank.status.success(), "a blank topic was taken");
    assert_says(&stderr(&blank), "--topic must not be empty");
    let partly = jobwire(
        &db.url,
        &["outbox", "replay", "--id", "41", "--id", "999999"],
    );
    assert!(!partly.status.success(), "an unknown id was accepted");
    assert_says(&stderr(&partly), "not an outbox dead letter: 999999");
    assert_says(&stdout(&partly), "1 outbox row moved back");
    let moved: i64 = sqlx::query_scalar("SELECT count(*) FROM job_outbox WHERE id = 41")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(moved, 1);
    let again = jobwire(&db.url, &["outbox", "replay", "--id", "41"]);
    assert!(!again.status.success(), "a row moved twice");
    pool.close().await;
    db.drop_database().await;
}

#[tokio::test]
async fn queues_are_listed_paused_and_resumed_from_the_command_line() {
    let db = FreshDatabase::create().await;
    assert!(jobwire(&db.url, &["migrate"]).status.success());
    let enqueued = jobwire(&db.url, &["enqueue", "import_row", "--queue", "imports"]);
    assert!(enqueued.status.success(), "{}", stderr(&enqueued));

    let paused = jobwire(&db.url, &["queue", "pause", "imports"]);
    assert!(paused.status.success(), "{}", stderr(&paused));
    assert!(stdout(&paused).contains("paused"), "{}", stdout(&paused));
    assert!(
        !stderr(&paused).contains("note:"),
        "a queue holding a job is known: {}",
        stderr(&paused)
    );
    let listed = jobwire(&db.url, &["queue", "list", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let queues: serde_json::Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let imports = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|queue| queue["queue"] == "imports")
        .unwrap_or_else(|| panic!("no imports in {queues}"));
    assert_eq!(imports["paused"], true);
    assert_eq!(imports["queued"], 1);
    let text = stdout(&jobwire(&db.url, &["queue", "list"]));
    assert!(
        text.lines()
            .any(|line| line.starts_with("imports") && line.contains("yes")),
        "{text}"
    );

    // A name never seen is paused all the same, with a note to check it.
    let typo = jobwire(&db.url, &["queue", "pause", "imprts"]);
    assert!(typo.status.success(), "{}", stderr(&typo));
    assert_says(&stderr(&typo), "note: no queue");
    // So do the limits and tenants of a name never seen, read or set; a
    // known queue's are read without the note.
    for args in [
        &["queue", "limits", "imprtz"][..],
        &["tenant", "list", "imprtz"],
        &["tenant", "set", "imprtz", "--max-running", "2"],
        &["queue", "limit", "imprtx", "--max-queued", "10"],
    ] {
        let typo = jobwire(&db.url, args);
        assert!(typo.status.success(), "{args:?}: {}", stderr(&typo));
        assert_says(&stderr(&typo), "note: no queue");
    }
    let known = jobwire(&db.url, &["queue", "limits", "imports"]);
    assert!(!stderr(&known).contains("note:"), "{}", stderr(&known));
    let blank = jobwire(&db.url, &["queue", "pause", " "]);
    assert!(!blank.status.success(), "a blank queue name was paused");

    let resumed = jobwire(&db.url, &["queue", "resume", "imports"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let pool = db.pool().await;
    let still_paused: Vec<String> =
        sqlx::query_scalar("SELECT queue FROM job_queues WHERE paused ORDER BY queue")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(still_paused, vec!["imprts".to_owned()]);
    pool.close().await;
    db.drop_database().await;
}

/// A queue left broker-dispatched (as `jobwire run`, whose in-process
/// transport is its default, leaves its queues) is refused by a worker on
/// the default path, with how to serve it or bring it back; `--transport
/// postgres` brings it back and runs its waiting job.
#[tokio::test]
async fn a_broker_dispatched_queue_is_brought_back_with_transport_postgres() {
    let (db, pool) = migrated_database().await;
    jobwire_core::set_queue_dispatch(
        &pool,
        "imports",
        &jobwire_core::Dispatch::Broker {
            topic: "jobwire-imports".into(),
        },
    )
    .await
    .unwrap();
    let enqueue = jobwire(&db.url, &["enqueue", "noop", "--queue", "imports"]);
    assert!(enqueue.status.success(), "{}", stderr(&enqueue));
    let job_id: Uuid = stdout(&enqueue).trim().parse().unwrap();

    let refused = refused(&db.url, &["worker", "--queue", "imports=1"]).await;
    assert!(!refused.status.success());
    assert_says(
        &stderr(&refused),
        "dispatched through a broker (topic jobwire-imports)",
    );
    assert_says(&stderr(&refused), "--transport postgres");
    let still = jobwire_core::queue_dispatch(&pool, "imports")
        .await
        .unwrap();
    assert!(
        matches!(still, jobwire_core::Dispatch::Broker { .. }),
        "{still:?}"
    );

    let worker = start(
        &db.url,
        &["worker", "--queue", "imports=1", "--transport", "postgres"],
    );
    let finished = wait_for_all_finished(&pool, &[job_id], Duration::from_secs(60)).await;
    let now = jobwire_core::queue_dispatch(&pool, "imports")
        .await
        .unwrap();
    drop(worker);
    pool.close().await;
    db.drop_database().await;
    finished.unwrap();
    assert_eq!(now, jobwire_core::Dispatch::Postgres);
}

/// A graceful stop waits for the running job (here for up to ten
/// minutes); a second Ctrl-C (2 s or more after the first: one sent with
/// it is the same request) ends the process at once, with status 130,
/// saying what becomes of that job: its lease lapses and the sweeper
/// retries it. (The first signal alone cannot end it: the job sleeps ten
/// minutes and stops early only when cancelled.)
#[tokio::test]
async fn a_second_ctrl_c_exits_at_once() {
    let (db, pool) = migrated_database().await;
    let job = jobwire_core::enqueue(
        &pool,
        &jobwire_core::NewJob::new("sleep", serde_json::json!({ "ms": 600_000 }))
            .with_queue("slow"),
    )
    .await
    .unwrap()
    .job_id;
    let mut worker = Command::new(JOBWIRE)
        .args([
            "worker",
            "--transport",
            "postgres",
            "--queue",
            "slow=1",
            "--shutdown-timeout-s",
            "600",
        ])
        .env("DATABASE_URL", &db.url)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_count(
        &pool,
        "SELECT count(*) FROM jobs WHERE job_id = $1::uuid AND state = 'RUNNING'",
        &job.to_string(),
        1,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let interrupt = |child: &Child| {
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    // Two at once, as a process manager's Ctrl-C sends them (SIGINT to
    // the group, and the manager's SIGTERM): one request to stop.
    interrupt(&worker);
    interrupt(&worker);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        worker.try_wait().unwrap().is_none(),
        "the first Ctrl-C waits for the running job, and one right after it is the same request"
    );
    interrupt(&worker);
    wait_for_exit(
        &mut worker,
        Duration::from_secs(15),
        "a worker after a second Ctrl-C",
    )
    .await;
    let output = worker.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    assert_says(&stderr(&output), "second shutdown signal: exiting at once");
    let status = jobwire_core::job_status(&pool, job).await.unwrap();
    assert_eq!(status.state, JobState::Running, "left to its lease");
    pool.close().await;
    db.drop_database().await;
}

/// A long-running command waits for a database that gives no answer at
/// first (a failover that drops packets), within its wait for the
/// database, rather than exiting when its first connection's 5 s pass.
#[tokio::test]
async fn a_worker_waits_for_a_database_that_gives_no_answer_at_first() {
    let (db, pool) = migrated_database().await;
    let job = enqueue_ids(
        &pool,
        &[jobwire_core::NewJob::new("noop", serde_json::json!({}))],
    )
    .await
    .unwrap()[0];
    let mut url = url::Url::parse(&db.url).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = jobwire_test_support::FlakyProxy::start(&upstream, true)
        .await
        .unwrap();
    // The first connection is taken and never answered.
    proxy.hang_new();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(proxy.addr.port())).unwrap();
    let mut worker = Command::new(JOBWIRE)
        .args(["worker", "--transport", "postgres", "--queue", "default=1"])
        .env("DATABASE_URL", url.as_str())
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.serve_new();
    let finished = wait_for_all_finished(&pool, &[job], Duration::from_secs(60)).await;
    let status = Command::new("kill")
        .args(["-INT", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for_exit(
        &mut worker,
        Duration::from_secs(15),
        "a worker after Ctrl-C",
    )
    .await;
    let output = worker.wait_with_output().unwrap();
    finished.unwrap_or_else(|err| panic!("{err}: {}", stderr(&output)));
    assert_says(&stderr(&output), "gave no answer within 5 s; retrying");
    assert!(output.status.success(), "{}", stderr(&output));
    pool.close().await;
    db.drop_database().await;
}

/// Reaching a Kafka bootstrap address nothing answers on takes the
/// transport's timeout (30 s); Ctrl-C meanwhile ends the worker at once,
/// with nothing declared. (The ceiling below is generous: without the
/// signal being heard the worker waits the whole timeout.)
#[tokio::test]
async fn ctrl_c_stops_a_worker_still_reaching_its_broker() {
    let (db, pool) = migrated_database().await;
    let output = interrupted_after(
        &db.url,
        &[
            "worker",
            "--queue",
            "imports=1",
            "--transport",
            "kafka",
            "--kafka-bootstrap",
            "127.0.0.1:1",
        ],
        Duration::from_secs(2),
    )
    .await;
    assert!(!output.status.success());
    assert_says(&stderr(&output), "stopped before the worker started");
    // librdkafka's own lines are off by default.
    assert!(
        !stderr(&output).contains("librdkafka"),
        "{}",
        stderr(&output)
    );
    let still = jobwire_core::queue_dispatch(&pool, "imports")
        .await
        .unwrap();
    assert_eq!(still, jobwire_core::Dispatch::Postgres);
    pool.close().await;
    db.drop_database().await;
}

/// A worker about to declare the path of a queue that no job is in and no
/// worker declared says so, and names the queues with a close name: most
/// often the name is a typo, whose worker would otherwise idle in silence,
/// and declare the name for good, while the real queue waits. A queue that
/// exists is served without a word.
#[tokio::test]
async fn a_worker_for_a_mistyped_queue_names_the_queue_that_exists() {
    let (db, pool) = migrated_database().await;
    let enqueue = jobwire(&db.url, &["enqueue", "noop", "--queue", "bulk"]);
    assert!(enqueue.status.success(), "{}", stderr(&enqueue));
    let output = interrupted_after(
        &db.url,
        &[
            "worker",
            "--transport",
            "postgres",
            "--queue",
            "bulk=1",
            "--queue",
            "bluk=1",
            "--queue",
            "reports=1",
        ],
        Duration::from_secs(3),
    )
    .await;
    let said = stderr(&output);
    let line = |queue: &str| {
        said.lines()
            .find(|line| line.contains("a new queue") && line.contains(&format!("queue={queue}")))
            .map(str::to_owned)
    };
    let typo = line("bluk").unwrap_or_else(|| panic!("no line for bluk in:\n{said}"));
    assert!(
        typo.contains("WARN")
            && typo.contains("a typo of a queue that exists?")
            && typo.contains("similar=bulk"),
        "{typo}"
    );
    let new = line("reports").unwrap_or_else(|| panic!("no line for reports in:\n{said}"));
    assert!(new.contains("INFO") && !new.contains("similar"), "{new}");
    assert_eq!(line("bulk"), None, "{said}");
    pool.close().await;
    db.drop_database().await;
}

/// A worker whose broker cannot be reached (here a port nothing listens on;
/// a mistyped address or password alike) does not move a queue onto it:
/// it refuses to start, says why, and the queue stays on the PostgreSQL
/// path, where its waiting job still runs.
#[tokio::test]
async fn a_worker_does_not_move_a_queue_to_a_broker_it_cannot_reach() {
    let (db, pool) = migrated_database().await;
    let enqueue = jobwire(&db.url, &["enqueue", "noop", "--queue", "imports"]);
    assert!(enqueue.status.success(), "{}", stderr(&enqueue));
    let job_id: Uuid = stdout(&enqueue).trim().parse().unwrap();

    let refused = refused(
        &db.url,
        &[
            "worker",
            "--queue",
            "imports=1",
            "--transport",
            "rabbitmq",
            "--amqp-url",
            "amqp://guest:guest@127.0.0.1:1/%2f",
        ],
    )
    .await;
    assert!(!refused.status.success());
    assert_says(
        &stderr(&refused),
        "cannot reach the broker (rabbitmq at 127.0.0.1:1 (vhost /))",
    );
    assert_says(
        &stderr(&refused),
        "queue imports stays where it is (postgres)",
    );
    let still = jobwire_core::queue_dispatch(&pool, "imports")
        .await
        .unwrap();
    assert_eq!(still, jobwire_core::Dispatch::Postgres);

    let worker = start(&db.url, &["worker", "--queue", "imports=1"]);
    let finished = wait_for_all_finished(&pool, &[job_id], Duration::from_secs(60)).await;
    drop(worker);
    pool.close().await;
    db.drop_database().await;
    finished.unwrap();
}

/// A reader that stops reading (`jobwire queue list | head -1`) ends the
/// command quietly, with success: `println!` panicked on the broken pipe.
/// Output lost to anything else fails the command.
#[tokio::test]
async fn output_to_a_reader_that_has_gone_ends_quietly() {
    let (db, pool) = migrated_database().await;
    let enqueued = jobwire(&db.url, &["enqueue", "noop", "--queue", "imports"]);
    assert!(enqueued.status.success(), "{}", stderr(&enqueued));
    let mut child = Command::new(JOBWIRE)
        .args(["queue", "list"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The read end closes before the command has connected, so its first
    // line already meets the broken pipe.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    // Output lost any other way (a full disk: /dev/full) fails the command.
    let full = Command::new(JOBWIRE)
        .args(["queue", "list"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    pool.close().await;
    db.drop_database().await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "", "said something on a broken pipe");
    assert!(
        !full.status.success(),
        "output lost to a full disk succeeded"
    );
    assert_says(&stderr(&full), "cannot write to standard output");
}

#[tokio::test]
async fn retention_periods_are_set_from_the_command_line() {
    let (db, pool) = migrated_database().await;
    // Two finished jobs in `jobs`, two archived ones in `jobs_history`; the
    // defaults (1 h, 30 days) would move the first pair and keep the second.
    let [moved, kept, trimmed, left] = [
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
    ];
    sqlx::query(
        "INSERT INTO jobs (job_id, queue, job_type, state, attempt_count, lease_generation, finished_at)
         VALUES ($1, 'keep', 'noop', 'SUCCEEDED', 1, 1, now() - interval '4 hours'),
                ($2, 'keep', 'noop', 'SUCCEEDED', 1, 1, now() - interval '2 hours')",
    )
    .bind(moved)
    .bind(kept)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO jobs_history (job_id, queue, job_type, state, finished_at, archived_at)
         VALUES ($1, 'keep', 'noop', 'SUCCEEDED', now() - interval '11 days', now() - interval '10 days'),
                ($2, 'keep', 'noop', 'SUCCEEDED', now() - interval '3 days', now() - interval '2 days')",
    )
    .bind(trimmed)
    .bind(left)
    .execute(&pool)
    .await
    .unwrap();

    let mut worker = Command::new(JOBWIRE)
        .args([
            "worker",
            "--queue",
            "keep=1",
            "--keep-finished",
            "3h",
            "--keep-history",
            "5days",
            "--no-sweeper",
            "--no-reconciler",
            "--no-scheduler",
        ])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(StopOnDrop)
        .unwrap();
    // A pass archives, then trims: once the old history row is gone, the
    // pass's archiving is over.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM jobs_history WHERE job_id = $1)",
    )
    .bind(trimmed)
    .fetch_one(&pool)
    .await
    .unwrap()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the retention pass never trimmed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.kill().unwrap();
    worker.wait().unwrap();
    let in_jobs: Vec<Uuid> = sqlx::query_scalar("SELECT job_id FROM jobs ORDER BY job_id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        in_jobs,
        vec![kept],
        "finished 2 h ago stays under --keep-finished 3h"
    );
    let in_history: Vec<Uuid> =
        sqlx::query_scalar("SELECT job_id FROM jobs_history ORDER BY job_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut expected = vec![moved, left];
    expected.sort();
    assert_eq!(
        in_history, expected,
        "archived 2 days ago stays under --keep-history 5days"
    );

    // Bad periods are refused before the worker starts, with the form to use.
    for (args, says) in [
        (["--keep-history", "0s"], "write `forever` to keep them all"),
        (
            ["--keep-finished", "a while"],
            "write it like 90m, 12h, 7days or 2weeks",
        ),
    ] {
        let mut command = vec!["worker", "--queue", "keep=1"];
        command.extend(args);
        let refused = jobwire(&db.url, &command);
        assert!(!refused.status.success());
        assert_says(&stderr(&refused), says);
    }
    let refused = jobwire(
        &db.url,
        &["worker", "--no-retention", "--keep-audit", "forever"],
    );
    assert!(!refused.status.success());
    assert_says(&stderr(&refused), "cannot be used with");
    pool.close().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_schedule_nothing_fires_is_shown_as_overdue() {
    let (db, pool) = migrated_database().await;
    let put = jobwire(
        &db.url,
        &[
            "schedule",
            "put",
            "hourly",
            "--cron",
            "0 * * * *",
            "--type",
            "noop",
        ],
    );
    assert!(put.status.success(), "{}", stderr(&put));
    let fresh = jobwire(&db.url, &["schedule", "show", "hourly"]);
    assert!(fresh.status.success(), "{}", stderr(&fresh));
    assert!(!stdout(&fresh).contains("OVERDUE"), "{}", stdout(&fresh));

    // No worker ran for three hours: the next occurrence is long past.
    sqlx::query(
        "UPDATE job_schedules SET next_run_at = date_trunc('hour', now()) - interval '3 hours'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let late = jobwire(&db.url, &["schedule", "show", "hourly"]);
    assert!(late.status.success(), "{}", stderr(&late));
    let shown = stdout(&late);
    assert_says(&shown, "OVERDUE by ");
    assert_says(&shown, "nothing fires schedules");
    let next_lines: Vec<&str> = shown
        .lines()
        .filter(|line| line.contains("next  "))
        .collect();
    assert_eq!(next_lines.len(), 3, "{shown}");
    assert!(
        next_lines.iter().all(|line| line.contains("OVERDUE")),
        "{shown}"
    );
    let listed = jobwire(&db.url, &["schedule", "list"]);
    assert_says(&stdout(&listed), "OVERDUE by ");
    pool.close().await;
    db.drop_database().await;
}

/// `schedule put --tenant`: the schedule keeps it and says so; a blank one
/// is refused, naming the field, and nothing is stored.
#[tokio::test]
async fn a_schedule_put_for_a_tenant_says_so() {
    let (db, pool) = migrated_database().await;
    let put = |tenant: &str| {
        jobwire(
            &db.url,
            &[
                "schedule",
                "put",
                "acme-nightly",
                "--cron",
                "0 2 * * *",
                "--type",
                "noop",
                "--tenant",
                tenant,
            ],
        )
    };
    let blank = put(" ");
    assert!(!blank.status.success());
    assert_says(&stderr(&blank), "tenant");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM job_schedules")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    let created = put("acme");
    assert!(created.status.success(), "{}", stderr(&created));
    assert_says(&stdout(&created), "noop on queue default for tenant acme");
    pool.close().await;
    db.drop_database().await;
}

/// A schedule stored with a zone this version does not know is listed and
/// shown with its problem; the other schedules are listed beside it.
#[tokio::test]
async fn a_schedule_that_cannot_be_evaluated_is_shown_with_its_problem() {
    let (db, pool) = migrated_database().await;
    let put = jobwire(
        &db.url,
        &[
            "schedule",
            "put",
            "hourly",
            "--cron",
            "0 * * * *",
            "--type",
            "noop",
        ],
    );
    assert!(put.status.success(), "{}", stderr(&put));
    sqlx::query(
        "INSERT INTO job_schedules (name, cron, timezone, job_type, next_run_at)
         VALUES ('on-mars', '0 8 * * *', 'Mars/Olympus_Mons', 'noop', now() + interval '1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();

    let listed = jobwire(&db.url, &["schedule", "list"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let text = stdout(&listed);
    assert_says(&text, "hourly  0 * * * *");
    assert_says(
        &text,
        "PROBLEM    cannot be evaluated: invalid argument timezone: \"Mars/Olympus_Mons\" is not a time zone name",
    );
    let shown = jobwire(&db.url, &["schedule", "show", "on-mars"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert_says(
        &stdout(&shown),
        "replace it with `jobwire schedule put on-mars`",
    );

    let json = jobwire(&db.url, &["schedule", "list", "--json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    let by_name = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|schedule| schedule["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed}"))
            .clone()
    };
    assert_eq!(
        by_name("hourly")["next_occurrences"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let bad = by_name("on-mars");
    assert_eq!(bad["next_occurrences"], serde_json::json!([]), "{bad}");
    assert!(
        bad["problem"]
            .as_str()
            .unwrap_or_default()
            .contains("is not a time zone name"),
        "{bad}"
    );
    pool.close().await;
    db.drop_database().await;
}

/// `jobwire run ARGS` where ARGS hold a setting that cannot work: the
/// process's output once it has exited. Were the setting taken, `run` would
/// serve until stopped: it gets 30 s.
async fn run_refused(url: &str, args: &[&str]) -> Output {
    let run: Vec<&str> = std::iter::once("run").chain(args.iter().copied()).collect();
    refused(url, &run).await
}

/// A long-running command (`run`, `worker`) that must refuse to start:
/// waited for with a bound, killed past it.
async fn refused(url: &str, args: &[&str]) -> Output {
    let mut refused = Command::new(JOBWIRE)
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let what = format!("`{args:?}` was not refused");
    wait_for_exit(&mut refused, Duration::from_secs(30), &what).await;
    refused.wait_with_output().unwrap()
}

/// Wait at most `within` for `child` to exit; past that, kill it and fail
/// with `what`.
/// Run `jobwire args…` with the default log filter, send it Ctrl-C
/// (SIGINT) `after` that long, and return what it said once it has ended.
async fn interrupted_after(url: &str, args: &[&str], after: Duration) -> Output {
    let mut process = Command::new(JOBWIRE)
        .args(args)
        .env("DATABASE_URL", url)
        // The default filter, which RUST_LOG would replace.
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(after).await;
    let status = Command::new("kill")
        .args(["-INT", &process.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for_exit(
        &mut process,
        Duration::from_secs(15),
        "a process after Ctrl-C",
    )
    .await;
    process.wait_with_output().unwrap()
}

async fn wait_for_exit(child: &mut Child, within: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if tokio::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{what}: still running after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `jobwire run`'s relay takes `--relay-batch-size` and `--relay-concurrency`
/// (it ran at the relay's defaults, with no way to change them), and a
/// setting that cannot work is refused before anything is written (`run`
/// migrates an empty database).
#[tokio::test]
async fn run_takes_the_relays_settings() {
    let db = FreshDatabase::create().await;
    for flag in ["--relay-batch-size", "--relay-concurrency"] {
        let refused = run_refused(&db.url, &[flag, "0"]).await;
        assert!(!refused.status.success());
        assert_says(&stderr(&refused), flag);
        assert_says(&stderr(&refused), "0 is not at least 1");
    }
    let pool = db.pool().await;
    let schema: Option<String> = sqlx::query_scalar("SELECT to_regclass('jobs')::text")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(schema, None, "nothing written");

    let queue = format!("relay_flags_{}", Uuid::new_v4().simple());
    let queue_arg = format!("{queue}=8");
    // The relay's log goes to a file: a pipe nobody reads until the end
    // could fill and stall the process.
    let log_path = std::env::temp_dir().join(format!("{queue}.log"));
    let mut runner = Command::new(JOBWIRE)
        .args([
            "run",
            "--queue",
            &queue_arg,
            "--relay-batch-size",
            "7",
            "--relay-concurrency",
            "2",
            "--no-scheduler",
            "--shutdown-timeout-s",
            "1",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn,jobwire_relay=info,jobwire_server=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
        .spawn()
        .map(StopOnDrop)
        .unwrap();
    // The queue is declared broker-dispatched (the in-process transport)
    // once `run` has migrated and started.
    let declared = wait_for_count(
        &pool,
        "SELECT count(*) FROM job_queues WHERE queue = $1 AND dispatch = 'broker'",
        &queue,
        1,
        Duration::from_secs(60),
    )
    .await;
    if let Err(err) = declared {
        panic!("queue not declared: {err}");
    }
    // 30 jobs in one transaction: their 30 outbox rows are there together
    // for the relay's first pass, which may take only 7 of them.
    let jobs: Vec<jobwire_core::NewJob> = (0..30)
        .map(|n| {
            jobwire_core::NewJob::new("noop", serde_json::json!({ "n": n })).with_queue(&queue)
        })
        .collect();
    let ids = enqueue_ids(&pool, &jobs).await.unwrap();
    if let Err(err) = wait_for_all_finished(&pool, &ids, Duration::from_secs(60)).await {
        panic!("{err}");
    }
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE job_id = ANY($1) AND state = 'SUCCEEDED'",
    )
    .bind(&ids)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(succeeded, 30);
    let status = Command::new("kill")
        .args(["-INT", &runner.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for_exit(&mut runner, Duration::from_secs(30), "`run` after SIGINT").await;
    let (status, out) = runner.stdout_at_exit().unwrap();
    assert!(status.success());
    let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|err| panic!("{err}: {out}"));
    let relay = &report["relays"][0];
    assert_eq!(relay["published"], 30, "{report}");
    assert_eq!(relay["largest_batch"], 7, "{report}");
    // How many tasks drain is seen only in what the relay says as it starts.
    let log = std::fs::read_to_string(&log_path).unwrap();
    std::fs::remove_file(&log_path).unwrap();
    assert_says(&log, "relay started");
    assert_says(&log, "batch_size=7");
    assert_says(&log, "concurrency=2");
    // Each part says that it stopped, the relay with what it did.
    let stopped = log
        .lines()
        .find(|line| line.contains("relay stopped:"))
        .unwrap_or_else(|| panic!("no stop line in:\n{log}"));
    assert_says(stopped, "published=30");
    assert_says(&log, "HTTP API listening");
    assert_says(&log, "HTTP API stopped");
    pool.close().await;
    db.drop_database().await;
}
