//! Child processes in tests.

use std::process::{Child, Command};

/// A child process that is stopped (SIGTERM, then waited for) when the
/// guard goes out of scope, so a failing assertion leaves no worker behind
/// to hold its group's partitions or its database open.
pub struct StopOnDrop(pub Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let _ = self.0.wait();
        }
    }
}
