//! Jitter for intervals: many processes started together must not poll,
//! retry or sweep in lockstep.

use std::time::Duration;

use rand::Rng;

/// The spread every poll, sweep and retry pause uses: ±20 %.
pub const POLL_SPREAD: f64 = 0.2;

/// `base` scaled by a random factor in `[1 - spread, 1 + spread]` (never
/// below zero).
pub fn jittered(base: Duration, spread: f64) -> Duration {
    let spread = spread.clamp(0.0, 1.0);
    if spread == 0.0 {
        return base;
    }
    let factor = 1.0 + rand::rng().random_range(-spread..=spread);
    base.mul_f64(factor.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_the_spread_and_varies() {
        let base = Duration::from_millis(1000);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let value = jittered(base, 0.2);
            assert!(value >= Duration::from_millis(800), "{value:?}");
            assert!(value <= Duration::from_millis(1200), "{value:?}");
            seen.insert(value);
        }
        assert!(seen.len() > 1, "jitter never varied");
        assert_eq!(jittered(base, 0.0), base);
    }
}
