//! Child processes in tests.

use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A child process that is stopped (SIGTERM, then waited for) when the
/// guard goes out of scope, so a failing assertion leaves no worker behind
/// to hold its group's partitions or its database open. It derefs to the
/// child, so a test waits for, signals or reads it as it would the child.
pub struct StopOnDrop(pub Child);

impl StopOnDrop {
    /// Waits for the process to exit; its exit status and everything it
    /// wrote to its stdout (empty unless stdout is piped; stderr is not
    /// read). `wait_with_output` needs the child itself, which the guard
    /// keeps.
    pub fn stdout_at_exit(&mut self) -> std::io::Result<(ExitStatus, String)> {
        let mut stdout = String::new();
        if let Some(mut pipe) = self.0.stdout.take() {
            // To the end: the pipe closes when the process exits.
            pipe.read_to_string(&mut stdout)?;
        }
        Ok((self.0.wait()?, stdout))
    }
}

impl Deref for StopOnDrop {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for StopOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        // CONT after TERM: a test that froze the process (SIGSTOP) and then
        // failed leaves it stopped, and a stopped process acts on TERM only
        // once it runs again.
        for signal in ["-TERM", "-CONT"] {
            let _ = Command::new("kill")
                .args([signal, &self.0.id().to_string()])
                .status();
        }
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
