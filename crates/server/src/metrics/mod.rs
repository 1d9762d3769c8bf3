//! Prometheus metrics. The workers, the relay and the API record through the
//! `metrics` facade; this module installs the process's Prometheus recorder
//! (once: it is process-wide), renders the text exposition `/metrics`
//! serves, and runs the [`DatabaseCollector`] that turns what the database
//! holds into gauges. docs/operations.md lists every metric.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

mod collector;
mod names;

pub use collector::{CollectorConfig, DatabaseCollector};

/// Histogram buckets, in seconds, for every `*_seconds` histogram: from a
/// millisecond (a claim on an idle queue) to an hour (a long backlog).
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// A gauge nobody has set for this long disappears from the exposition: a
/// queue that no longer exists, a dead-letter group that was retried, or
/// every database gauge of a process that is no longer the elected
/// collector. Longer than the collector's longest interval allows.
pub(crate) const GAUGE_IDLE: Duration = Duration::from_secs(30);

/// How often histogram samples recorded between scrapes are folded into
/// their buckets, so memory stays bounded however rarely /metrics is read.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
}

static INSTALLED: OnceLock<Result<Metrics, String>> = OnceLock::new();

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the Prometheus recorder: {0}")]
pub struct MetricsError(String);

impl Metrics {
    /// The process's recorder, installed on the first call (later calls
    /// return the same one). Fails only when the application installed a
    /// `metrics` recorder of its own: jobwire's metrics then go there.
    pub fn install() -> Result<Metrics, MetricsError> {
        INSTALLED
            .get_or_init(|| {
                let recorder = PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                    .and_then(|builder| {
                        builder
                            .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE))
                            .install_recorder()
                    })
                    .map_err(|err| err.to_string())?;
                let metrics = Metrics { handle: recorder };
                names::describe();
                crate::api::refusals::describe();
                jobwire_consumer::metrics::describe();
                jobwire_relay::metrics::describe();
                let upkeep = metrics.handle.clone();
                // A plain thread: it must outlive any one Tokio runtime.
                std::thread::Builder::new()
                    .name("jobwire-metrics-upkeep".into())
                    .spawn(move || {
                        loop {
                            std::thread::sleep(UPKEEP_EVERY);
                            upkeep.run_upkeep();
                        }
                    })
                    .map_err(|err| err.to_string())?;
                Ok(metrics)
            })
            .clone()
            .map_err(MetricsError)
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}
