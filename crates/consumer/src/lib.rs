//! jobwire-consumer: the code that runs jobs.
//!
//! - [`HandlerRegistry`]: job type -> async handler, with its backoff and timeout.
//! - [`JobRuntime`]: runs claimed jobs (handler task, heartbeats, cancellation,
//!   deadline, panic capture) and reports outcomes through the batched,
//!   fenced completer. One implementation serves every wake-up source.
//! - [`Worker`]: per queue, either the PostgreSQL path (SKIP LOCKED batches
//!   woken by LISTEN/NOTIFY with a jittered poll fallback) or the broker path
//!   (deliveries as wake-ups for one fenced claim per batch), as the database
//!   dispatches the queue; per-queue concurrency, staged shutdown; on the
//!   PostgreSQL path, a local queue of jobs claimed ahead of the free slots
//!   while a backlog of short jobs lasts.
//! - [`maintenance`]: the lease sweeper, the retention loop and the wake-up
//!   reconciler, one file each, run together by [`maintenance::Maintenance`].
#![warn(missing_docs)]

mod background;
mod broker_path;
pub mod builtin;
mod completer;
mod handler;
mod lease_keeper;
mod local_queue;
pub mod maintenance;
pub mod metrics;
mod postgres_path;
mod runtime;
mod stats;
mod worker;

pub use handler::{
    CancelReason, HandlerOptions, HandlerRegistry, JobContext, JobError, JobErrorKind, JobHandler,
};
pub use runtime::{JobRuntime, RuntimeConfig};
pub use stats::{WorkerReport, WorkerStats};
pub use worker::{QueueConfig, Worker, WorkerConfig, WorkerError};

/// A lease owner id unique to this process and call: `jobwire-<pid>-<random>`.
pub fn default_worker_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("jobwire-{}-{}", std::process::id(), &random[..8])
}
