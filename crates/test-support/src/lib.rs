//! jobwire-test-support: the helpers jobwire's integration tests share, in
//! every crate's `tests/` and in the workspace-level `tests/` crate. Every
//! test runs against a real PostgreSQL (a fresh database per test via
//! `#[sqlx::test]`, or a [`FreshDatabase`] for tests that run the binary)
//! and, where it needs one, a real broker.
//!
//! - [`jobs`]: wait for jobs, expire a lease, count wake-ups, enqueue;
//! - [`worker`]: handler options, worker and maintenance settings for tests;
//! - [`brokers`]: broker addresses from the environment, a free loopback port;
//! - [`outbox`]: write outbox rows, drain a subscriber, count the outbox;
//! - [`proxy`]: a TCP proxy a test can switch off to take a broker away;
//! - [`database`]: a database of its own for one test, a wait on a count in it, and a
//!   wait for a session to wait for a lock;
//! - [`faults`]: a database statement made to fail;
//! - [`plans`]: the indexes a query plan scans, and the scans that ran.
//!
//! Everything is re-exported at the crate root.
#![warn(missing_docs)]

pub mod brokers;
pub mod database;
pub mod faults;
pub mod jobs;
pub mod outbox;
pub mod plans;
pub mod process;
pub mod proxy;
pub mod worker;

pub use brokers::free_port;
pub use database::{FreshDatabase, until_a_session_waits_for_a_lock, wait_for_count};
pub use faults::{
    break_capped_wake_up_claim, refuse_jobs_noted_refuse, repair_capped_wake_up_claim,
};
pub use jobs::{
    enqueue_ids, expire_lease, lose_wake_ups, wait_for_all_finished, wait_for_job, wait_for_state,
    wake_ups_for,
};
pub use outbox::{drain_subscriber, outbox_len, write_outbox_rows};
pub use plans::{
    executed_scans, plan_indexes, rows_read_in_transaction, table_stat_in_transaction,
};
pub use process::StopOnDrop;
pub use proxy::FlakyProxy;
pub use worker::{fast_options, test_maintenance, test_worker_config};
