//! The subcommands that run against a connected pool, one module each
//! (`jobwire demo`, which makes its own connection, lives in `crate::demo`).

pub(crate) mod bench;
pub(crate) mod bench_http;
pub(crate) mod bench_schedules;
pub(crate) mod cancel;
pub(crate) mod count_arg;
pub(crate) mod dead_letters;
pub(crate) mod enqueue;
pub(crate) mod job_id_arg;
pub(crate) mod migrate;
pub(crate) mod outbox;
pub(crate) mod queue;
pub(crate) mod queue_state;
pub(crate) mod relay;
pub(crate) mod replay;
pub(crate) mod retention_args;
pub(crate) mod schedule;
pub(crate) mod serve;
pub(crate) mod status;
pub(crate) mod tenant;
pub(crate) mod token;
pub(crate) mod worker;
