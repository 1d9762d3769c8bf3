//! The relay's metrics, recorded through the `metrics` facade (a no-op
//! unless the process installed a recorder, as jobwire-server does for
//! `/metrics`). Labelled by transport only; docs/operations.md explains
//! each one.

use std::time::Duration;

use metrics::{Unit, counter, describe_counter, describe_histogram, histogram};

/// Outbox rows published (broker-confirmed) and deleted.
pub const PUBLISHED: &str = "jobwire_relay_published_total";
/// Failed publish attempts counted against rows (they stay due, with
/// backoff, until their last attempt moves them aside).
pub const PUBLISH_FAILURES: &str = "jobwire_relay_publish_failures_total";
/// Passes in which the broker was unavailable or slower than the publish
/// budget: every row stayed due, no attempt counted against any.
pub const BROKER_DOWN: &str = "jobwire_relay_broker_down_passes_total";
/// Rows moved aside to `job_outbox_dead` after their last attempt.
pub const DEAD_LETTERED: &str = "jobwire_relay_dead_lettered_total";
/// Seconds one batch took to publish (the broker's confirms included).
pub const PUBLISH_TIME: &str = "jobwire_relay_publish_seconds";

/// Describe every relay metric (HELP and unit) to the installed recorder.
pub fn describe() {
    describe_counter!(
        PUBLISHED,
        Unit::Count,
        "Outbox rows published (broker-confirmed) and deleted, by transport."
    );
    describe_counter!(
        PUBLISH_FAILURES,
        Unit::Count,
        "Failed publish attempts counted against outbox rows, by transport."
    );
    describe_counter!(
        BROKER_DOWN,
        Unit::Count,
        "Relay passes that found the broker unavailable or slower than the publish budget (rows stay due), by transport."
    );
    describe_counter!(
        DEAD_LETTERED,
        Unit::Count,
        "Outbox rows moved aside to job_outbox_dead, by transport."
    );
    describe_histogram!(
        PUBLISH_TIME,
        Unit::Seconds,
        "Time one batch took to publish, confirms included, by transport; not counted for a pass that found the broker unavailable."
    );
}

/// What one pass did, as counted in the metrics.
pub(crate) fn record_pass(transport: &'static str, published: usize, failed: usize, dead: usize) {
    for (name, n) in [
        (PUBLISHED, published),
        (PUBLISH_FAILURES, failed),
        (DEAD_LETTERED, dead),
    ] {
        if n > 0 {
            counter!(name, "transport" => transport).increment(n as u64);
        }
    }
}

/// A pass that found the broker down (or too slow): nothing counted
/// against its rows.
pub(crate) fn record_broker_down(transport: &'static str) {
    counter!(BROKER_DOWN, "transport" => transport).increment(1);
}

pub(crate) fn record_publish_time(transport: &'static str, took: Duration) {
    histogram!(PUBLISH_TIME, "transport" => transport).record(took.as_secs_f64());
}
