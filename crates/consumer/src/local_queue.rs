//! The local queue of a PostgreSQL-path queue: jobs claimed ahead of its
//! free slots, so that one claim (one commit) and one completion batch
//! serve hundreds of jobs while a backlog of short jobs lasts.
//!
//! A claimed-ahead job holds its lease from the claim, but no handler slot:
//! it waits here for one ([`StartGate`]). Its attempt starts when its
//! handler does; one given back before that (shutdown, a cancel request, a
//! lost lease, a wait past [`LOCAL_QUEUE_MAX_WAIT`] because the pace fell
//! after its claim) is recorded as [`jobwire_core::FinishOutcome::Returned`],
//! its attempt uncounted. How many jobs a queue claims ahead follows how
//! fast it starts them ([`StartRate`]): no more than it starts within
//! [`LOCAL_QUEUE_HORIZON`], so that a worker busy with slow jobs does not
//! hoard jobs another worker could start. The jobs of one claim reach the gate in the order their
//! tasks first run, which is nearly but not exactly the claim's order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The longest a claimed-ahead job should wait for a slot at its queue's
/// current pace: the local queue holds no more jobs than the queue starts
/// in this time.
pub(crate) const LOCAL_QUEUE_HORIZON: Duration = Duration::from_millis(50);

/// The longest a claimed-ahead job waits for a slot before it is given
/// back (due at once, its attempt uncounted): its queue's handlers slowed
/// down after it was claimed (long jobs took every slot, say), and another
/// worker may have room for it.
pub(crate) const LOCAL_QUEUE_MAX_WAIT: Duration = Duration::from_secs(1);

/// Where a claimed-ahead job waits for one of its queue's handler slots.
#[derive(Clone)]
pub(crate) struct StartGate {
    slots: Arc<Semaphore>,
    concurrency: usize,
    /// Jobs given a slot so far.
    starts: Arc<AtomicU64>,
}

impl StartGate {
    /// A gate with `concurrency` handler slots.
    pub(crate) fn new(concurrency: usize) -> Self {
        StartGate {
            slots: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            starts: Arc::default(),
        }
    }

    /// Wait for a handler slot, first come first served (cancel-safe:
    /// dropping the future gives up the place in line).
    pub(crate) async fn turn(&self) -> OwnedSemaphorePermit {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the gate's semaphore is never closed");
        self.starts.fetch_add(1, Ordering::Relaxed);
        slot
    }

    /// A handler slot if one is free now (no place in line is taken).
    pub(crate) fn try_turn(&self) -> Option<OwnedSemaphorePermit> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        self.starts.fetch_add(1, Ordering::Relaxed);
        Some(slot)
    }

    /// Jobs given a slot so far.
    pub(crate) fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Slots given back so far: jobs started and no longer running. This,
    /// not [`StartGate::starts`], is the queue's pace: the starts that fill
    /// idle slots (a worker's first claim, a backlog arriving after a quiet
    /// spell) come at once whatever the jobs' length, where slots free only
    /// as fast as the jobs run. (Read without a lock: between a slot being
    /// taken and its start being counted, this reads one short.)
    pub(crate) fn frees(&self) -> u64 {
        let running = self
            .concurrency
            .saturating_sub(self.slots.available_permits()) as u64;
        self.starts().saturating_sub(running)
    }
}

/// How fast a queue starts jobs, read as how fast its slots free
/// ([`StartGate::frees`]): a moving mean of frees per second, each reading
/// weighed by the time it covers (a time constant of 100 ms), read by the
/// queue's claim loop before each claim. The mean climbs from nothing over
/// about 100 ms on purpose: jobs of about equal length free their slots in
/// waves, and a few milliseconds of one wave read as a pace many times the
/// queue's.
#[derive(Debug)]
pub(crate) struct StartRate {
    last_read: Instant,
    frees_then: u64,
    per_second: f64,
}

/// Shortest time a reading covers; closer readings keep the mean as it is.
const SHORTEST_READING: Duration = Duration::from_millis(5);
/// A reading this long or longer replaces the mean.
const TIME_CONSTANT: Duration = Duration::from_millis(100);

impl StartRate {
    /// No start seen yet, from `now`.
    pub(crate) fn new(now: Instant) -> Self {
        StartRate {
            last_read: now,
            frees_then: 0,
            per_second: 0.0,
        }
    }

    /// Given the gate's count of freed slots at `now`, how many jobs to
    /// hold beyond the slots (at most `limit`): as many as the queue starts
    /// within [`LOCAL_QUEUE_HORIZON`] at its recent rate.
    pub(crate) fn ahead(&mut self, frees: u64, now: Instant, limit: usize) -> usize {
        let covered = now.saturating_duration_since(self.last_read);
        if covered >= SHORTEST_READING {
            let reading = frees.saturating_sub(self.frees_then) as f64 / covered.as_secs_f64();
            let weight = (covered.as_secs_f64() / TIME_CONSTANT.as_secs_f64()).min(1.0);
            self.per_second += (reading - self.per_second) * weight;
            self.last_read = now;
            self.frees_then = frees;
        }
        let within_horizon = (self.per_second * LOCAL_QUEUE_HORIZON.as_secs_f64()).round();
        // `as` saturates: a huge or NaN rate cannot overflow.
        (within_horizon as usize).min(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_claimed_ahead_before_jobs_start() {
        let start = Instant::now();
        let mut rate = StartRate::new(start);
        assert_eq!(rate.ahead(0, start, 512), 0);
        assert_eq!(rate.ahead(0, start + 200 * MS, 512), 0);
    }

    #[test]
    fn the_local_queue_holds_what_the_queue_starts_within_the_horizon() {
        let start = Instant::now();
        // 1,000 starts a second, read over 100 ms: 50 within 50 ms.
        let mut rate = StartRate::new(start);
        assert_eq!(rate.ahead(100, start + 100 * MS, 512), 50);
        assert_eq!(rate.ahead(100, start + 100 * MS, 16), 16);
        // Slow jobs: 64 slots of 2 s each start 32 a second, 1.6 within
        // 50 ms: 2.
        let mut slow = StartRate::new(start);
        assert_eq!(slow.ahead(32, start + 1000 * MS, 512), 2);
        // 64 slots of 10 s each: 6.4 a second, none within 50 ms.
        let mut slower = StartRate::new(start);
        assert_eq!(slower.ahead(64, start + 10_000 * MS, 512), 0);
        // Fast ones: 20,000 a second fill the limit.
        let mut fast = StartRate::new(start);
        assert_eq!(fast.ahead(2_000, start + 100 * MS, 512), 512);
    }

    #[test]
    fn the_rate_follows_recent_frees_and_ignores_readings_too_close() {
        let start = Instant::now();
        let mut rate = StartRate::new(start);
        assert_eq!(rate.ahead(2_000, start + 100 * MS, 512), 512);
        // Read again 1 ms later, with no free since: too close to count.
        assert_eq!(rate.ahead(2_000, start + 101 * MS, 512), 512);
        // Then the queue goes idle for 100 ms: the rate falls to nothing.
        assert_eq!(rate.ahead(2_000, start + 200 * MS, 512), 0);
        // A short reading moves it only part of the way: 10 ms at 20,000
        // a second is a tenth of the way from 0, 2,000 a second, 100 ahead.
        assert_eq!(rate.ahead(2_200, start + 210 * MS, 512), 100);
    }

    #[test]
    fn a_burst_of_starts_into_idle_slots_sets_no_pace_until_slots_free() {
        // 64 slots taken at once by jobs that run long: 64 starts within a
        // millisecond, no slot freed, so nothing is claimed ahead.
        let gate = StartGate::new(64);
        let mut held: Vec<_> = (0..64).map(|_| gate.try_turn().unwrap()).collect();
        assert_eq!(gate.starts(), 64);
        assert_eq!(gate.frees(), 0);
        let start = Instant::now();
        let mut rate = StartRate::new(start);
        assert_eq!(rate.ahead(gate.frees(), start + 10 * MS, 512), 0);
        // Ten of them finish within the next 100 ms: 100 a second, 5
        // within 50 ms.
        held.truncate(54);
        assert_eq!(gate.frees(), 10);
        assert_eq!(rate.ahead(gate.frees(), start + 110 * MS, 512), 5);
        drop(held);
        assert_eq!(gate.frees(), 64);
    }
}
