//! Child processes in tests.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A child process that is stopped (SIGTERM, then waited for) when the
/// guard goes out of scope, so a failing assertion leaves no worker behind
/// to hold its group's partitions or its database open.
pub struct StopOnDrop(pub Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        // A process that does not stop in 30 s is killed.
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.0.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.0.kill();
                let _ = self.0.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
