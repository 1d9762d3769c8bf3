//! jobwire-loop: the plumbing every long-running jobwire loop shares, so
//! that the worker, the relay and the maintenance loops wait, back off and
//! listen the same way.
//!
//! - [`Backoff`]: capped exponential delay `min(max, base·2^(n−1))` plus an
//!   additive jitter — job retries and outbox row retries;
//! - [`Pause`]: the same curve as a loop's state, for "something failed, wait
//!   before trying again" (doubles per failure, resets on success);
//! - [`IdlePoll`]: an idle loop's pauses — short right after it found work
//!   (to pick up commits whose NOTIFY was skipped), doubling up to its poll
//!   interval;
//! - [`jittered`]: spread a fixed interval so many processes do not poll in
//!   lockstep;
//! - [`sleep`] and [`sleep_or_notified`]: sleeps that end early on shutdown
//!   (and on a wake-up);
//! - [`Wake`]: a wake-up shared by several loops that a loop busy when it
//!   was sent still sees at its next wait;
//! - [`listen`]: LISTEN on a channel with reconnects, reporting when
//!   notifications may have been lost;
//! - [`Outage`]: failures in a row, so that a loop can say when they ended;
//! - [`storable_text`]: text from elsewhere as PostgreSQL can keep it;
//! - [`why_task_ended`]: a spawned task's panic as text; [`join_loops`]:
//!   loops that must not end before shutdown, joined, the first early end
//!   stopping the rest;
//! - [`InvalidSetting`]: the typed error every `Config::validate` returns;
//! - [`nonzero_counts`]: a loop's counters that moved, for its stop line.
//!
//! This crate is a leaf: it knows nothing of jobs or outboxes, so the relay
//! can use it without depending on the job store.
#![warn(missing_docs)]

mod backoff;
mod counts;
mod idle;
mod jitter;
mod listen;
mod outage;
mod pause;
mod setting;
mod sleep;
mod storable;
mod task_end;
mod wake;

pub use backoff::Backoff;
pub use counts::nonzero_counts;
pub use idle::IdlePoll;
pub use jitter::{POLL_SPREAD, jittered};
pub use listen::{ListenEvent, listen};
pub use outage::{Outage, OutageEnded};
pub use pause::Pause;
pub use setting::InvalidSetting;
pub use sleep::{Wait, sleep, sleep_or_notified};
pub use storable::{MAX_ERROR_TEXT_BYTES, storable_text};
pub use task_end::{join_loops, why_task_ended};
pub use wake::Wake;
