//! Logs to stderr; and traces over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set — nothing is exported
//! otherwise. Spans: each job attempt (`job`, linked to the span the job was
//! enqueued in), and whatever the libraries underneath record.

use std::io::IsTerminal;

#[cfg(feature = "otlp")]
use anyhow::Context;
use anyhow::Result;
use opentelemetry::trace::TracerProvider as _;
#[cfg(feature = "otlp")]
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// What must be flushed before the process exits.
pub(crate) struct Telemetry {
    traces: Option<SdkTracerProvider>,
}

/// Whether the environment asks for traces to be exported.
#[cfg(feature = "otlp")]
fn otlp_requested() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// Install the process's subscriber: logs at `default_filter` (unless
/// `RUST_LOG` says otherwise), and the OTLP exporter when asked for.
pub(crate) fn init(default_filter: &str) -> Result<Telemetry> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not in log files.
        .with_ansi(std::io::stderr().is_terminal());
    let traces = otlp_provider()?;
    // Each layer filters for itself: RUST_LOG=warn quiets the logs, not the
    // spans (an attempt's span is at info level).
    let otel = traces.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("jobwire"))
            .with_filter(LevelFilter::INFO)
    });
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(otel)
        .init();
    Ok(Telemetry { traces })
}

/// The OTLP exporter's provider, when the environment asks for one.
#[cfg(feature = "otlp")]
fn otlp_provider() -> Result<Option<SdkTracerProvider>> {
    Ok(if otlp_requested() {
        // The exporter reads the endpoint, headers and timeout from the
        // standard OTEL_EXPORTER_OTLP_* variables (HTTP with protobuf).
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .context("cannot set up the OTLP trace exporter")?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("jobwire");
        }
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.build())
                .build(),
        )
    } else {
        None
    })
}

/// Built without the `otlp` feature (the demo's build): nothing to export
/// to, and a word if the environment expected it.
#[cfg(not(feature = "otlp"))]
fn otlp_provider() -> Result<Option<SdkTracerProvider>> {
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        eprintln!(
            "warning: this jobwire was built without the otlp feature; traces are not exported"
        );
    }
    Ok(None)
}

impl Telemetry {
    /// Export the spans still buffered (at exit).
    pub(crate) fn shutdown(self) {
        if let Some(provider) = self.traces
            && let Err(err) = provider.shutdown()
        {
            eprintln!("warning: exporting the last traces failed: {err}");
        }
    }
}
