//! What a node did, reported when it stops.

use jobwire_consumer::WorkerReport;
use jobwire_relay::RelayReport;
use serde::Serialize;

/// The final counters of every part of a [`crate::Node`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeReport {
    /// The worker's counters, if the node ran one.
    pub worker: Option<WorkerReport>,
    /// Each relay lane's counters, in the order the lanes were added.
    pub relays: Vec<RelayReport>,
}
