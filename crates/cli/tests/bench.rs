//! A small run of the benchmark harness over every path, checking that it
//! completes, that every run measured what it says, and that no job was
//! lost or run twice. Speed is not asserted: it is measured, and reported in
//! docs/benchmarks.md.

use std::process::Stdio;
use std::time::Duration;

use jobwire_test_support::FreshDatabase;

const PATHS: [&str; 5] = ["postgres", "memory", "rabbitmq", "sqs", "kafka"];

#[tokio::test]
async fn the_bench_harness_runs_every_path_without_losing_a_job() {
    let db = FreshDatabase::create().await;
    let scratch = std::env::temp_dir().join(format!("jobwire-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&scratch).unwrap();
    let (json, chart) = (scratch.join("bench.json"), scratch.join("bench.svg"));
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args(["bench", "--paths", &PATHS.join(",")])
        .args(["--jobs", "300", "--sqs-jobs", "100", "--relay-rows", "300"])
        // A longer drain than the other runs (not on SQS).
        .args(["--drain-jobs", "400"])
        .args([
            "--workers",
            "16",
            "--producers",
            "4",
            "--enqueue-batch",
            "20",
        ])
        .args(["--rate", "50", "--sqs-rate", "50", "--rate-seconds", "2"])
        .args(["--lag-rate", "50"])
        .args(["--burst-jobs", "300", "--sqs-burst-jobs", "300"])
        .args(["--urgent-rate", "10"])
        .args(["--e2e-runs", "2", "--commit-probe-seconds", "1"])
        .args(["--noisy-jobs", "300", "--quiet-tenant-rate", "5"])
        // The noisy-tenant runs' jobs work (wait) 5 ms each; every other
        // run's jobs are no-ops.
        .args(["--noisy-job-ms", "5"])
        // A run that stalls fails with the name of the run, not a hang.
        .args(["--timeout-seconds", "180"])
        // Keep the jobs, for the check of the table below.
        .arg("--keep-jobs")
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Far past any run's own timeout: only a process that stopped making
    // progress outside every run gets here.
    let output = tokio::time::timeout(Duration::from_secs(1800), child.wait_with_output())
        .await
        .expect("jobwire bench hung past every run's timeout")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    let paths: Vec<&str> = results
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, PATHS);
    for result in results {
        let broker = result["path"] != "postgres";
        let jobs = if result["path"] == "sqs" { 100 } else { 300 };
        let drain_jobs = if result["path"] == "sqs" { 100 } else { 400 };
        for run in ["drain", "end_to_end", "end_to_end_batched"] {
            let run_jobs = if run == "drain" { drain_jobs } else { jobs };
            assert_eq!(result[run]["jobs"], run_jobs, "{result}");
            assert_eq!(result[run]["lost_or_repeated"], 0, "{result}");
            assert!(
                result[run]["cost"]["commits_per_job"].as_f64().unwrap() > 0.0,
                "{result}"
            );
        }
        // Both single-job runs were kept, and the plain commit rate beside them.
        let single_runs = result["end_to_end_runs"].as_array().unwrap();
        assert_eq!(single_runs.len(), 2, "{result}");
        for run in single_runs {
            assert_eq!(run["jobs"], jobs, "{result}");
            assert_eq!(run["lost_or_repeated"], 0, "{result}");
        }
        let commit_rate = &result["commit_rate"];
        assert_eq!(commit_rate["clients"], 4, "{result}");
        assert!(
            commit_rate["commits_per_second"].as_f64().unwrap() > 0.0,
            "{result}"
        );
        assert!(
            ["pgbench", "in-process"].contains(&commit_rate["tool"].as_str().unwrap()),
            "{result}"
        );
        // The noisy tenant, caps off then on: every quiet job measured
        // (ten tenants at 5/s for 2 s), none lost.
        let noisy = result["noisy_tenant"].as_array().unwrap();
        assert_eq!(noisy.len(), 2, "{result}");
        assert!(noisy[0]["tenant_cap"].is_null(), "{result}");
        assert_eq!(noisy[1]["tenant_cap"], 12, "{result}");
        // The slot hand-over is measured only under a cap: 300 jobs held at
        // 12 hand over 288 slots.
        assert!(noisy[0]["slot_handover_p95_ms"].is_null(), "{result}");
        assert!(
            noisy[1]["slot_handover_p95_ms"].as_f64().unwrap() >= 0.0,
            "{result}"
        );
        for run in noisy {
            assert_eq!(run["quiet_jobs"], 100, "{result}");
            assert_eq!(run["job_ms"], 5, "{result}");
            // Every handler of the run worked that long (as it timed itself).
            assert!(run["shortest_job_ms"].as_f64().unwrap() >= 5.0, "{result}");
            assert_eq!(run["lost_or_repeated"], 0, "{result}");
            assert!(
                run["noisy_drain_per_second"].as_f64().unwrap() > 0.0,
                "{result}"
            );
        }
        // Every job of the open-loop runs was measured.
        assert_eq!(result["steady_rate"]["jobs"], 100, "{result}");
        assert_eq!(result["urgent_under_burst"]["jobs"], 20, "{result}");
        assert_eq!(result["urgent_under_burst"]["bulk_jobs"], 300, "{result}");
        // Where the urgent jobs' time went: every stage seen for every one
        // of them (a broker path's wake-ups through the relay and the
        // broker; none of them on the PostgreSQL path).
        let stages: Vec<&str> = result["urgent_stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|stage| {
                assert_eq!(stage["jobs"], 20, "{result}");
                stage["stage"].as_str().unwrap()
            })
            .collect();
        let expected: &[&str] = if broker {
            &[
                "arrives -> enqueue",
                "enqueue -> committed",
                "committed -> relay publishes",
                "relay publishes -> confirmed",
                "confirmed -> delivered",
                "delivered -> claim starts",
                "claim starts -> handler starts",
                "enqueue -> handler starts",
            ]
        } else {
            &[
                "arrives -> enqueue",
                "enqueue -> committed",
                "committed -> claim starts",
                "claim starts -> handler starts",
                "enqueue -> handler starts",
            ]
        };
        assert_eq!(stages, expected, "{result}");
        // The relay runs exist exactly where there is a relay.
        if broker {
            assert_eq!(result["relay_alone"]["rows"], jobs, "{result}");
            assert_eq!(result["outbox_lag"]["rows"], 100, "{result}");
        } else {
            assert!(result["relay_alone"].is_null(), "{result}");
            assert!(result["outbox_lag"].is_null(), "{result}");
        }
    }
    assert_eq!(report["environment"]["fsync"], "on");
    // Unless told otherwise, the broker runs use the relay's own settings,
    // as `jobwire run` and `jobwire relay` run it.
    let relay = jobwire_relay::RelayConfig::default();
    assert_eq!(
        report["environment"]["relay_batch_size"], relay.batch_size,
        "{report}"
    );
    assert_eq!(
        report["environment"]["relay_concurrency"], relay.concurrency,
        "{report}"
    );
    assert!(
        report["environment"]["durable_commit_ms"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(stdout.contains("drain/s"), "{stdout}");
    assert!(stdout.contains("e2e/plain"), "{stdout}");
    assert!(stdout.contains("quiet p95"), "{stdout}");
    assert!(stdout.contains("delivered -> claim starts"), "{stdout}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    // Each path names its group of bars (a text element of its own).
    for path in PATHS {
        assert!(
            svg.lines().any(|line| line.trim() == path),
            "{path} missing: {svg}"
        );
    }
    std::fs::remove_dir_all(&scratch).unwrap();

    // The table agrees: every bench job finished, and succeeded once.
    let pool = db.pool().await;
    let (jobs, good): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'SUCCEEDED' AND attempt_count = 1) FROM jobs",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // Per path: a drain of 400 (100 on SQS), two single-job end-to-end
    // runs and a batched one of 300 (100 on SQS), 100 steady-rate jobs, the
    // bulk backlog of 300 and 20 urgent jobs, and two noisy-tenant runs of
    // 300 + 100 jobs.
    let noisy = 2 * (300 + 100);
    let expected =
        4 * (400 + 3 * 300 + 100 + 300 + 20 + noisy) + (4 * 100 + 100 + 300 + 20 + noisy);
    assert_eq!((jobs, good), (expected, expected));
    let outbox_left: i64 = sqlx::query_scalar("SELECT count(*) FROM job_outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(outbox_left, 0, "the relay runs left outbox rows behind");
    pool.close().await;
    db.drop_database().await;
}

/// Run `jobwire ARGS` against `db` (logging at info, and every API request
/// the process serves, which a success is logged at debug); the JSON it
/// printed, once it succeeded, and its log.
async fn jobwire_json(db: &FreshDatabase, args: &[&str]) -> (serde_json::Value, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "info,jobwire_server::api::request_id=debug")
        .output()
        .await
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{log}");
    (serde_json::from_slice(&output.stdout).unwrap(), log)
}

/// The schedule burst: every due schedule fires once, jitter spreads the
/// starts over its window, and the bench leaves nothing behind.
#[tokio::test]
async fn the_schedule_burst_fires_each_schedule_once_and_cleans_up() {
    let db = FreshDatabase::create().await;
    let (runs, _) = jobwire_json(
        &db,
        &[
            "bench-schedules",
            "--schedules",
            "2000",
            "--schedulers",
            "2",
            "--jitter-seconds",
            "60",
            "--json",
        ],
    )
    .await;
    let (plain, jittered) = (&runs[0], &runs[1]);
    for run in [plain, jittered] {
        assert_eq!(run["occurrences"], 2000, "{run}");
        assert!(run["per_second"].as_f64().unwrap() > 0.0);
    }
    // Without jitter every start is the same instant; with 60 s of it, the
    // starts cover most of the window and no second holds many of them.
    assert_eq!(plain["start_spread_seconds"], 0.0);
    assert_eq!(plain["peak_starts_per_second"], 2000);
    assert!(
        jittered["start_spread_seconds"].as_f64().unwrap() > 50.0,
        "{jittered}"
    );
    assert!(
        jittered["peak_starts_per_second"].as_i64().unwrap() < 200,
        "{jittered}"
    );
    let pool = db.pool().await;
    for table in ["jobs", "job_schedules"] {
        let left: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(left, 0, "{table}");
    }
    pool.close().await;
    db.drop_database().await;
}

/// The HTTP producer run: every job of both interfaces in every round
/// enqueued and counted, the HTTP ones as requests the API server answered
/// (its request log), the interface that goes first alternating, and
/// nothing left behind, in particular no live token.
#[tokio::test]
async fn the_http_producer_run_enqueues_every_job_and_revokes_its_token() {
    let db = FreshDatabase::create().await;
    let (comparisons, log) = jobwire_json(
        &db,
        &[
            "bench-http",
            "--clients",
            "2,5",
            "--jobs",
            "300",
            "--rounds",
            "2",
            "--json",
        ],
    )
    .await;
    let comparisons = comparisons.as_array().unwrap();
    assert_eq!(comparisons.len(), 2);
    for (comparison, clients) in comparisons.iter().zip([2, 5]) {
        assert_eq!(comparison["clients"].as_u64(), Some(clients));
        let rounds = comparison["rounds"].as_array().unwrap();
        let firsts: Vec<&str> = rounds
            .iter()
            .map(|round| round["first"].as_str().unwrap())
            .collect();
        assert_eq!(firsts, ["library", "http"], "{comparison}");
        for round in rounds {
            for interface in ["library", "http"] {
                let run = &round[interface];
                assert_eq!(run["interface"], interface, "{run}");
                assert_eq!(
                    (run["clients"].as_u64(), run["jobs"].as_u64()),
                    (Some(clients), Some(300))
                );
                assert!(run["per_second"].as_f64().unwrap() > 0.0, "{run}");
            }
        }
        // With two rounds the median is the lower of the two.
        let lower = |field: &dyn Fn(&serde_json::Value) -> f64| {
            rounds.iter().map(field).fold(f64::INFINITY, f64::min)
        };
        assert_eq!(
            comparison["http_over_library"].as_f64(),
            Some(lower(&|round| round["http_over_library"].as_f64().unwrap())),
            "{comparison}"
        );
        assert_eq!(
            comparison["library_per_second"].as_f64(),
            Some(lower(&|round| round["library"]["per_second"]
                .as_f64()
                .unwrap())),
            "{comparison}"
        );
    }
    let answered = log
        .lines()
        .filter(|line| line.contains("path=/jobs") && line.contains("status=201"))
        .count();
    assert_eq!(
        answered,
        2 * 2 * 300,
        "POST /jobs requests the server answered with 201"
    );
    let pool = db.pool().await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the runs' jobs are deleted");
    let tokens: Vec<(String, bool)> =
        sqlx::query_as("SELECT name, revoked_at IS NOT NULL FROM job_api_tokens ORDER BY name")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(tokens.len(), 4, "one token per HTTP run: {tokens:?}");
    assert!(tokens.iter().all(|(_, revoked)| *revoked), "{tokens:?}");
    pool.close().await;
    db.drop_database().await;
}

/// Bad settings are refused with a clear error and nothing is enqueued.
#[tokio::test]
async fn the_http_producer_run_refuses_zero_clients_or_rounds() {
    let db = FreshDatabase::create().await;
    for (args, error) in [
        (
            ["--clients", "0", "--rounds", "1"],
            "at least one job and one client",
        ),
        (["--clients", "2", "--rounds", "0"], "at least one round"),
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .arg("bench-http")
            .args(args)
            .args(["--jobs", "10"])
            .env("DATABASE_URL", &db.url)
            .output()
            .await
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(error), "{args:?}: {stderr}");
    }
    let pool = db.pool().await;
    let written: (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_api_tokens)")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(written, (0, 0), "jobs and tokens written");
    pool.close().await;
    db.drop_database().await;
}
