//! Capped exponential back-off: `min(max, base * 2^(n-1))` plus a bounded jitter.
//! Job retries (per handler), outbox row retries (the relay) and loop pauses
//! ([`crate::Pause`]) all follow this one curve.

use std::time::Duration;

use rand::Rng;

/// Capped exponential backoff with additive jitter.
///
/// The delay before retry `n` (n = the attempt that just failed, from 1) is
/// `min(max, base * 2^(n-1))` plus a jitter drawn uniformly from
/// `[0, jitter_ratio * that delay]`. With the defaults (5 s base, 15 min cap,
/// 10 % jitter) the schedule is 5, 10, 20, 40, ..., 640, 900, 900 ... seconds,
/// each stretched by at most a tenth. Jitter only ever adds, so a retry never
/// runs earlier than its schedule, and spreads herds of jobs that failed together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// Upper bound of the exponential part.
    pub max: Duration,
    /// Jitter as a fraction of the capped delay, in `[0, 1]`.
    pub jitter_ratio: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(5),
            max: Duration::from_secs(15 * 60),
            jitter_ratio: 0.1,
        }
    }
}

impl Backoff {
    /// The delay before jitter after `failed_attempt` (1-based) failed.
    pub fn capped_delay(&self, failed_attempt: u32) -> Duration {
        let exponent = failed_attempt.saturating_sub(1).min(62);
        let factor = 1u64 << exponent;
        let base_ms = self.base.as_millis().min(u128::from(u64::MAX)) as u64;
        let max_ms = self.max.as_millis().min(u128::from(u64::MAX)) as u64;
        Duration::from_millis(base_ms.saturating_mul(factor).min(max_ms))
    }

    /// The largest jitter that may be added to `capped`.
    pub fn max_jitter(&self, capped: Duration) -> Duration {
        capped.mul_f64(self.jitter_ratio.clamp(0.0, 1.0))
    }

    /// The delay to wait after `failed_attempt` failed: capped delay plus jitter.
    pub fn delay(&self, failed_attempt: u32) -> Duration {
        self.delay_with(failed_attempt, &mut rand::rng())
    }

    /// [`Backoff::delay`] with a caller-supplied random source (for tests).
    pub fn delay_with(&self, failed_attempt: u32, rng: &mut impl Rng) -> Duration {
        let capped = self.capped_delay(failed_attempt);
        let jitter = self.max_jitter(capped);
        if jitter.is_zero() {
            return capped;
        }
        capped + jitter.mul_f64(rng.random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schedule_doubles_from_five_seconds_and_caps_at_fifteen_minutes() {
        let backoff = Backoff::default();
        let schedule: Vec<u64> = (1..=10)
            .map(|n| backoff.capped_delay(n).as_secs())
            .collect();
        assert_eq!(schedule, vec![5, 10, 20, 40, 80, 160, 320, 640, 900, 900]);
        assert_eq!(backoff.capped_delay(1000).as_secs(), 900);
    }

    #[test]
    fn jitter_stays_within_its_documented_bounds() {
        let backoff = Backoff::default();
        let mut rng = rand::rng();
        for attempt in 1..=12 {
            let capped = backoff.capped_delay(attempt);
            let ceiling = capped + capped / 10;
            let mut saw_jitter = false;
            for _ in 0..500 {
                let delay = backoff.delay_with(attempt, &mut rng);
                assert!(delay >= capped, "{delay:?} below schedule {capped:?}");
                assert!(delay <= ceiling, "{delay:?} above bound {ceiling:?}");
                saw_jitter |= delay > capped;
            }
            assert!(saw_jitter, "attempt {attempt}: jitter never applied");
        }
    }

    #[test]
    fn zero_jitter_gives_the_exact_schedule() {
        let backoff = Backoff {
            jitter_ratio: 0.0,
            ..Backoff::default()
        };
        assert_eq!(backoff.delay(3), Duration::from_secs(20));
    }
}
