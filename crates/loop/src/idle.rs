//! How an idle loop polls: soon after it last found work, then less and
//! less often, up to its poll interval.
//!
//! Enqueuing transactions do not each send a NOTIFY (PostgreSQL serialises
//! notifying commits): one that commits while another holds its queue's wake
//! token skips its notification, and relies on the woken loop looking again
//! a moment later. So a loop that has just found work polls again after
//! [`IdlePoll::FIRST`], then twice that, and so on, until it is back at its
//! poll interval; a find starts the curve over. Ten empty polls take a
//! loop from 1 ms to about a second, so an idle process costs nothing
//! measurable.

use std::time::Duration;

use crate::{POLL_SPREAD, jittered};

/// The idle pauses of one loop: `FIRST`, doubling per empty poll, capped at
/// the poll interval. Only the capped pause is jittered (many processes at
/// their poll interval must not poll in lockstep; the short pauses right
/// after work are too short for that to matter).
#[derive(Debug, Clone, PartialEq)]
pub struct IdlePoll {
    poll_interval: Duration,
    /// The next short pause, or `None` when back at the poll interval.
    next_short: Option<Duration>,
}

impl IdlePoll {
    /// The pause after the first empty poll that followed work.
    pub const FIRST: Duration = Duration::from_millis(1);

    /// Idle pauses up to `poll_interval`, starting at the interval itself
    /// (a loop that has not yet found work has no stragglers to look for).
    pub fn new(poll_interval: Duration) -> Self {
        IdlePoll {
            poll_interval,
            next_short: None,
        }
    }

    /// Work was found: the next idle pauses start short again.
    pub fn found_work(&mut self) {
        self.next_short = Some(Self::FIRST);
    }

    /// The pause before the next poll, after a poll that found nothing.
    pub fn next_pause(&mut self) -> Duration {
        self.next_short_pause()
            .unwrap_or_else(|| jittered(self.poll_interval, POLL_SPREAD))
    }

    /// Like [`IdlePoll::next_pause`], but `None` once the curve is back at
    /// the poll interval, for a loop that computes its long pause itself
    /// (the relay sleeps until its next row is due).
    pub fn next_short_pause(&mut self) -> Option<Duration> {
        match self.next_short {
            Some(pause) if pause < self.poll_interval => {
                self.next_short = Some(pause * 2);
                Some(pause)
            }
            _ => {
                self.next_short = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_short_after_work_doubles_to_the_interval_and_jitters_only_there() {
        let interval = Duration::from_millis(100);
        let mut idle = IdlePoll::new(interval);
        let first = idle.next_pause();
        assert!(first >= interval.mul_f64(0.8) && first <= interval.mul_f64(1.2));

        idle.found_work();
        let pauses: Vec<u128> = (0..7).map(|_| idle.next_pause().as_millis()).collect();
        assert_eq!(pauses, vec![1, 2, 4, 8, 16, 32, 64]);
        let capped = idle.next_pause();
        assert!(capped >= interval.mul_f64(0.8) && capped <= interval.mul_f64(1.2));

        idle.found_work();
        assert_eq!(idle.next_pause(), IdlePoll::FIRST);
        assert_eq!(idle.next_short_pause(), Some(IdlePoll::FIRST * 2));
        idle.found_work();
        assert_eq!((0..7).filter_map(|_| idle.next_short_pause()).count(), 7);
        assert_eq!(idle.next_short_pause(), None);
    }

    #[test]
    fn an_interval_shorter_than_the_first_pause_is_kept() {
        let interval = Duration::from_micros(500);
        let mut idle = IdlePoll::new(interval);
        idle.found_work();
        let pause = idle.next_pause();
        assert!(pause >= interval.mul_f64(0.8) && pause <= interval.mul_f64(1.2));
    }
}
