//! Retry backoff for jobs: the one capped exponential curve of
//! [`jobwire_loop`], re-exported here because handlers configure it.

pub use jobwire_loop::Backoff;
