//! A run of failures in one loop, so that the loop can say when it ended.
//! An operator who read a screen of "claim failed" lines after a database
//! restart needs the line that says claims work again: silence reads the
//! same as a loop that gave up.

use std::fmt;
use std::time::{Duration, Instant};

/// Failures of one kind in a row, and when the first of them happened.
#[derive(Debug, Default)]
pub struct Outage {
    failures: u32,
    since: Option<Instant>,
}

/// How an outage ended: how many failures there were in a row, and how long
/// from the first of them to the success that ended them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutageEnded {
    /// Failures in a row before the success.
    pub failures: u32,
    /// From the first failure to the success, to the millisecond.
    pub lasted: Duration,
}

impl Outage {
    /// No failure yet.
    pub fn new() -> Self {
        Outage::default()
    }

    /// One more failure.
    pub fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        self.since.get_or_insert_with(Instant::now);
    }

    /// A success: the outage it ends, if failures came before it (once;
    /// the next success ends nothing).
    pub fn succeeded(&mut self) -> Option<OutageEnded> {
        let since = self.since.take()?;
        let failures = std::mem::take(&mut self.failures);
        let lasted = since.elapsed();
        Some(OutageEnded {
            failures,
            // Whole milliseconds: a log line says `1.234s`, not `1.234567891s`.
            lasted: Duration::from_millis(u64::try_from(lasted.as_millis()).unwrap_or(u64::MAX)),
        })
    }
}

impl fmt::Display for OutageEnded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.failures == 1 { "" } else { "s" };
        write!(
            f,
            "after {} failure{plural} over {:?}",
            self.failures, self.lasted
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_ends_the_failures_before_it_once() {
        let mut outage = Outage::new();
        assert_eq!(outage.succeeded(), None, "nothing failed yet");
        outage.failed();
        std::thread::sleep(Duration::from_millis(5));
        outage.failed();
        let ended = outage.succeeded().expect("two failures came before");
        assert_eq!(ended.failures, 2);
        assert!(ended.lasted >= Duration::from_millis(5), "{ended:?}");
        assert_eq!(
            ended.lasted.subsec_nanos() % 1_000_000,
            0,
            "whole milliseconds"
        );
        assert_eq!(outage.succeeded(), None, "already reported");
        outage.failed();
        assert_eq!(
            outage.succeeded().map(|e| e.failures),
            Some(1),
            "a new outage counts anew"
        );
    }

    #[test]
    fn it_reads_as_a_phrase() {
        let one = OutageEnded {
            failures: 1,
            lasted: Duration::from_millis(1_250),
        };
        assert_eq!(one.to_string(), "after 1 failure over 1.25s");
        let many = OutageEnded {
            failures: 7,
            lasted: Duration::from_millis(12_000),
        };
        assert_eq!(many.to_string(), "after 7 failures over 12s");
    }
}
