//! jobwire-relay: drains the transactional outbox (`job_outbox`) into a broker.
//!
//! Each pass claims due rows in a batch (`FOR UPDATE SKIP LOCKED`), publishes
//! them through a [`Transport`] (which returns only once the broker confirmed),
//! deletes the published rows and records failures, all in the transaction
//! that holds the row locks. So:
//! - several relays may drain one table at once (they skip each other's rows);
//! - a crash between publish and commit publishes those rows again:
//!   duplicates are possible, loss is not;
//! - a row that cannot be published (too large, bad destination) is retried
//!   a bounded number of times, then moved to `job_outbox_dead` with its
//!   error, and never blocks the rows behind it;
//! - while the broker is down the relay backs off with jitter and resumes by
//!   itself, without counting the outage against any row.
//!
//! The relay needs no jobs row behind a message: any service that writes rows
//! of the `job_outbox` shape is served.
#![warn(missing_docs)]

mod config;
mod error;
mod listen;
pub mod metrics;
mod pass;
mod run;
mod shards;
mod stats;

pub use config::{KeyOrdering, RelayConfig, TopicLane, TopicMap};
pub use error::RelayError;
pub use listen::OUTBOX_CHANNEL;
pub use pass::PassOutcome;
pub use run::Relay;
pub use stats::{RelayReport, RelayStats};

#[cfg(doc)]
use jobwire_transport::Transport;
