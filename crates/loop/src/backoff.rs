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
    /// Exact to the nanosecond: a base under a millisecond doubles too.
    pub fn capped_delay(&self, failed_attempt: u32) -> Duration {
        let exponent = failed_attempt.saturating_sub(1).min(62);
        let nanos = self.base.as_nanos().saturating_mul(1u128 << exponent);
        if nanos >= self.max.as_nanos() {
            return self.max;
        }
        // Below `max`, so its whole seconds fit.
        Duration::new(
            u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX),
            (nanos % 1_000_000_000) as u32,
        )
    }

    /// The largest jitter that may be added to `capped` (none for a ratio
    /// that is not a number).
    pub fn max_jitter(&self, capped: Duration) -> Duration {
        if self.jitter_ratio > 0.0 {
            scaled(capped, self.jitter_ratio.min(1.0))
        } else {
            Duration::ZERO
        }
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
        capped.saturating_add(scaled(jitter, rng.random::<f64>()))
    }
}

/// `duration` times `factor` (in `[0, 1]`), at most `duration`: the float
/// product of a duration near [`Duration::MAX`] can round past it.
fn scaled(duration: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(duration.as_secs_f64() * factor)
        .unwrap_or(duration)
        .min(duration)
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

    #[test]
    fn a_base_under_a_millisecond_doubles_too() {
        let backoff = Backoff {
            base: Duration::from_micros(500),
            max: Duration::from_secs(1),
            jitter_ratio: 0.0,
        };
        assert_eq!(backoff.capped_delay(1), Duration::from_micros(500));
        assert_eq!(backoff.capped_delay(2), Duration::from_millis(1));
        assert_eq!(backoff.capped_delay(10), Duration::from_millis(256));
        assert_eq!(backoff.capped_delay(12), Duration::from_secs(1));
    }

    #[test]
    fn extreme_settings_give_a_delay_not_a_panic() {
        let endless = Backoff {
            base: Duration::MAX,
            max: Duration::MAX,
            jitter_ratio: 1.0,
        };
        assert_eq!(endless.delay(u32::MAX), Duration::MAX);
        let not_a_number = Backoff {
            jitter_ratio: f64::NAN,
            ..Backoff::default()
        };
        assert_eq!(not_a_number.delay(1), Duration::from_secs(5));
        let negative = Backoff {
            jitter_ratio: -1.0,
            ..Backoff::default()
        };
        assert_eq!(negative.delay(2), Duration::from_secs(10));
    }
}
