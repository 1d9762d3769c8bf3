//! Jitter: spreading each occurrence's start over `[0, J)` seconds so that
//! 500,000 schedules due at 08:00 do not all start at 08:00.

use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};

/// The delay added to an occurrence's nominal instant: a hash of (schedule
/// name, nominal instant) mapped onto `[0, jitter_seconds)` in
/// milliseconds. Every scheduler computes the same value, so it does not
/// matter which one fires the occurrence, and a schedule's users see the
/// same offset each time for the same occurrence.
pub fn jitter_for(schedule: &str, nominal: DateTime<Utc>, jitter_seconds: u32) -> TimeDelta {
    if jitter_seconds == 0 {
        return TimeDelta::zero();
    }
    let mut hasher = Sha256::new();
    hasher.update(schedule.as_bytes());
    hasher.update([0]);
    hasher.update(nominal.timestamp_millis().to_be_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let span_ms = u64::from(jitter_seconds) * 1000;
    TimeDelta::milliseconds((u64::from_be_bytes(first) % span_ms) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_deterministic_bounded_and_spread() {
        let at = DateTime::parse_from_rfc3339("2026-11-01T02:30:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(jitter_for("digest", at, 600), jitter_for("digest", at, 600));
        assert_eq!(jitter_for("digest", at, 0), TimeDelta::zero());
        // 10,000 schedules due at one instant: every offset in range, and
        // spread over the window (each tenth of it gets about a tenth).
        let mut buckets = [0u32; 10];
        for n in 0..10_000 {
            let jitter = jitter_for(&format!("digest-{n}"), at, 600);
            assert!(jitter >= TimeDelta::zero() && jitter < TimeDelta::seconds(600));
            buckets[(jitter.num_milliseconds() / 60_000) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&b| (800..1200).contains(&b)),
            "{buckets:?}"
        );
    }
}
