//! What the two fault-suite tests share: running `jobwire faults` against
//! the test server with the repository's services script, and reading its
//! JSON report.

use std::process::{Command, Output};

use serde_json::Value;

/// The `jobwire` binary this crate builds.
pub const JOBWIRE: &str = env!("CARGO_BIN_EXE_jobwire");

/// The restarts every run must have made, by the names the report gives.
pub const RESTARTS: [&str; 4] = [
    "restart rabbitmq",
    "restart kafka",
    "restart sqs",
    "restart postgres",
];

/// The PostgreSQL server the tests use (`DATABASE_URL`).
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A finished run: its report, pretty-printed for assertion messages, and
/// the process's output (stderr, exit status).
pub struct FaultRun {
    pub report: Value,
    pub shown: String,
    pub output: Output,
}

impl FaultRun {
    /// The process's stderr, for assertion messages.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// Run `jobwire faults` with `args`, restarting services through
/// `scripts/services`, and read its report.
pub fn run_faults(args: &[&str]) -> FaultRun {
    let services = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/services");
    let output = Command::new(JOBWIRE)
        .arg("faults")
        .args(args)
        .args(["--services", services, "--json"])
        .env("DATABASE_URL", server_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("jobwire faults runs");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON report ({err}); stdout: {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let shown = serde_json::to_string_pretty(&report).unwrap();
    FaultRun {
        report,
        shown,
        output,
    }
}
