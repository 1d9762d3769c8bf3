//! The fault suite with no kills: every process lives through every
//! restart, the pause and the garbage, and must recover by itself.
//!
//! The suite's main run (`faults.rs`) kills a worker or a relay every
//! 1.5 s, and a process started afresh hides one that got stuck: a Kafka
//! relay whose producer was left unusable by the broker's restart
//! published nothing until it was restarted, and only a run without kills
//! showed it (docs/reliability.md, "What it found").
//!
//! It restarts the shared services, so it is the only test in this binary:
//! `cargo test` runs test binaries one after another, never beside each
//! other, so no other test sees the restarts.

mod fault_run;

use fault_run::{RESTARTS, run_faults};

const JOBS_PER_PATH: u64 = 100;

#[test]
fn every_process_recovers_by_itself_from_every_restart() {
    let run = run_faults(&[
        "--jobs-per-path",
        &JOBS_PER_PATH.to_string(),
        "--fault-seconds",
        "20",
        "--kill-every-ms",
        "0",
        // A ceiling for a stuck process, not a speed target: a run that
        // recovers drains seconds after the last fault.
        "--drain-timeout-s",
        "120",
    ]);
    let (report, shown) = (&run.report, &run.shown);
    let stderr = run.stderr();

    assert_eq!(report["paths"].as_array().unwrap().len(), 4, "{shown}");
    assert_eq!(report["load"]["enqueued"], JOBS_PER_PATH * 4, "{shown}");
    assert_eq!(report["kills"]["workers"], 0, "{shown}");
    assert_eq!(report["kills"]["relays"], 0, "{shown}");
    // Every restart happened, each with no error: a run that restarted
    // nothing would prove nothing.
    let faults = report["faults"].as_array().unwrap();
    for expected in RESTARTS {
        let fault = faults
            .iter()
            .find(|fault| fault["what"] == expected)
            .unwrap_or_else(|| panic!("{expected} missing: {shown}"));
        assert!(fault["error"].is_null(), "{expected} failed: {shown}");
    }
    assert!(
        report["load"]["failed_enqueue_attempts"].as_u64().unwrap() > 0,
        "PostgreSQL restarts while jobs are enqueued: {shown}"
    );
    assert_eq!(report["drained"], true, "{shown}\nstderr: {stderr}");
    for check in report["checks"].as_array().unwrap() {
        assert_eq!(
            check["violations"], 0,
            "check {:?} failed: {shown}\nstderr: {stderr}",
            check["name"]
        );
    }
    assert!(run.output.status.success(), "{shown}\nstderr: {stderr}");
}
