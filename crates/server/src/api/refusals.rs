//! `POST /jobs` requests that an enqueue limit refused (429, nothing
//! written), counted by queue and by the limit that refused them. A
//! producer told "full" retries after its `Retry-After`, and its own logs
//! may never reach the operator: this counter shows the backpressure on
//! `/metrics`, and the alert `JobwireEnqueuesRefused` says when it lasts.
//!
//! The queue label is bounded: only a queue with enqueue limits set (by an
//! admin, docs/tenants.md) refuses anything. Tenants are not labelled:
//! their names come from the producers.

use metrics::{Unit, counter, describe_counter};

const ENQUEUES_REFUSED: &str = "jobwire_api_enqueues_refused_total";

pub(crate) fn describe() {
    describe_counter!(
        ENQUEUES_REFUSED,
        Unit::Count,
        "POST /jobs requests an enqueue limit refused (429, nothing written), by queue and limit: max_queued, tenant_max_queued, shed, enqueue_rate."
    );
}

/// Count `err` if it is an enqueue limit's refusal; any other error is
/// not counted.
pub(crate) fn count_if_refused(err: &jobwire_core::Error) {
    use jobwire_core::{Error, FullReason};
    let (queue, limit) = match err {
        Error::QueueFull { reason, queue, .. } => (
            queue,
            match reason {
                FullReason::Queue => "max_queued",
                FullReason::Tenant => "tenant_max_queued",
                FullReason::Shed => "shed",
                // A reason added later keeps the database's own spelling
                // until it is given a label here (and in docs/operations.md).
                other => other.as_str(),
            },
        ),
        Error::RateLimited { queue, .. } => (queue, "enqueue_rate"),
        _ => return,
    };
    counter!(ENQUEUES_REFUSED, "queue" => queue.clone(), "limit" => limit).increment(1);
}
