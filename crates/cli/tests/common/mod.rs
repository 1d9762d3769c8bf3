//! What the process tests share: the binary under test and the schema step.

use std::process::Command;

/// The `jobwire` binary this crate builds.
pub const JOBWIRE: &str = env!("CARGO_BIN_EXE_jobwire");

/// Workers and relays never change the schema: apply it first, as an
/// operator's deploy would.
pub fn migrate(url: &str) {
    let status = Command::new(JOBWIRE)
        .arg("migrate")
        .env("DATABASE_URL", url)
        .status()
        .unwrap();
    assert!(status.success(), "jobwire migrate failed");
}
