//! The pause a loop takes after a failure: a database that refused a claim,
//! a broker that is down, a LISTEN that failed.

use std::time::Duration;

use crate::{Backoff, POLL_SPREAD, jittered};

/// Capped exponential pause for a loop that retries after failures: the
/// first failure waits `min`, each further one doubles it up to `max`, and
/// a success resets it. Each pause is jittered by ±20 % so that processes
/// that failed together (a database restart) do not come back together.
///
/// It is the same curve as [`Backoff`] (one implementation of the
/// doubling), kept as the loop's own state.
#[derive(Debug, Clone, PartialEq)]
pub struct Pause {
    curve: Backoff,
    failures: u32,
}

impl Pause {
    /// A pause that starts at `min` and never exceeds `max` (before jitter).
    pub fn new(min: Duration, max: Duration) -> Self {
        Pause {
            curve: Backoff {
                base: min,
                max,
                jitter_ratio: 0.0,
            },
            failures: 0,
        }
    }

    /// The pause the loops use unless told otherwise: 100 ms doubling up to 5 s.
    pub fn standard() -> Self {
        Pause::new(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The pause after one more failure (jittered), advancing the curve.
    pub fn next_after_failure(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        jittered(self.curve.capped_delay(self.failures), POLL_SPREAD)
    }

    /// The pause the next failure would start from, before jitter.
    pub fn current(&self) -> Duration {
        self.curve.capped_delay(self.failures.saturating_add(1))
    }

    /// Back to the shortest pause (call after a success).
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_its_cap_and_resets() {
        let mut pause = Pause::new(Duration::from_millis(100), Duration::from_millis(500));
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(pause.current().as_millis());
            let taken = pause.next_after_failure();
            let expected = Duration::from_millis(*seen.last().unwrap() as u64);
            assert!(taken >= expected.mul_f64(0.8) && taken <= expected.mul_f64(1.2));
        }
        assert_eq!(seen, vec![100, 200, 400, 500, 500]);
        pause.reset();
        assert_eq!(pause.current(), Duration::from_millis(100));
    }
}
