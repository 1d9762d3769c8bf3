//! A small run of the benchmark harness over every path, checking only that
//! it completes and that no job was lost or run twice (numbers are not
//! asserted: they are measured, and reported in docs/benchmarks.md).

use std::process::Command;

mod common;
use common::FreshDatabase;

#[tokio::test]
async fn the_bench_harness_runs_every_path_without_losing_a_job() {
    let db = FreshDatabase::create().await;
    let json = std::env::temp_dir().join(format!("jobwire-bench-{}.json", uuid::Uuid::new_v4()));
    let output = Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args([
            "bench",
            "--paths",
            "postgres,memory,rabbitmq,sqs,kafka",
            "--jobs",
            "300",
            "--sqs-jobs",
            "100",
            "--workers",
            "16",
            "--producers",
            "4",
            "--json",
        ])
        .arg(&json)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let results = report["results"].as_array().unwrap();
    let paths: Vec<&str> = results
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["postgres", "memory", "rabbitmq", "sqs", "kafka"]);
    for result in results {
        for run in ["drain", "end_to_end"] {
            assert_eq!(result[run]["lost_or_repeated"], 0, "{result}");
            assert!(
                result[run]["jobs_per_second"].as_f64().unwrap() > 0.0,
                "{result}"
            );
            assert!(
                result[run]["cost"]["commits_per_job"].as_f64().unwrap() > 0.0,
                "{result}"
            );
        }
    }
    assert_eq!(report["environment"]["fsync"], "on");
    assert!(stdout.contains("drain/s"), "{stdout}");
    // The table agrees: every bench job finished, and succeeded once.
    let pool = db.pool().await;
    let (jobs, good): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'SUCCEEDED' AND attempt_count = 1) FROM jobs",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((jobs, good), (2 * (4 * 300 + 100), 2 * (4 * 300 + 100)));
    pool.close().await;
    db.drop_database().await;
}
