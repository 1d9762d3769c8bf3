//! W3C trace context (<https://www.w3.org/TR/trace-context/>) on a job: the
//! span an enqueue was made in, so that every attempt's span can link to it.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The most bytes of `tracestate` kept (the W3C limit is 32 members; 512
/// bytes is what its guidance says every vendor must be able to carry).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The `traceparent` and `tracestate` of the span an enqueue was made in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `version-traceid-parentid-flags`, lowercase hex.
    pub traceparent: String,
    /// Vendor data that travels with it, if any.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A trace context from its two headers; `Err` says what is wrong (the
    /// field and the reason), as [`crate::Error::InvalidJob`] reports it.
    pub fn parse(
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<TraceContext, (&'static str, String)> {
        let context = TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        };
        context.validate()?;
        Ok(context)
    }

    /// Check the shape the jobs table stores (its CHECK constraints say the
    /// same): a version-00-shaped traceparent with non-zero ids, and at most
    /// [`MAX_TRACESTATE_BYTES`] of tracestate.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let well_formed = self.traceparent.len() == 55
            && self.traceparent.split('-').map(str::len).eq([2, 32, 16, 2])
            && self
                .traceparent
                .bytes()
                .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed || self.span_context().is_none() {
            return Err((
                "traceparent",
                "not a W3C traceparent (version-traceid-spanid-flags in lowercase hex, ids not all zero)"
                    .into(),
            ));
        }
        if let Some(state) = &self.tracestate
            && state.len() > MAX_TRACESTATE_BYTES
        {
            return Err((
                "tracestate",
                format!("longer than {MAX_TRACESTATE_BYTES} bytes"),
            ));
        }
        Ok(())
    }

    /// The trace context of the current `tracing` span, when it belongs to
    /// an OpenTelemetry trace (a `tracing-opentelemetry` layer is installed
    /// and the span is sampled or remote); `None` otherwise.
    pub fn current() -> Option<TraceContext> {
        let context = tracing::Span::current().context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        let current = TraceContext {
            traceparent: carrier.remove("traceparent")?,
            // Vendor data beyond what the table keeps is dropped, not the
            // enqueue: tracing must never make an enqueue fail.
            tracestate: carrier
                .remove("tracestate")
                .filter(|state| !state.is_empty() && state.len() <= MAX_TRACESTATE_BYTES),
        };
        current.validate().is_ok().then_some(current)
    }

    /// The span it names, as a remote span context (to link to); `None`
    /// when the traceparent does not parse.
    pub fn span_context(&self) -> Option<SpanContext> {
        let mut carrier = HashMap::from([("traceparent".to_owned(), self.traceparent.clone())]);
        if let Some(state) = &self.tracestate {
            carrier.insert("tracestate".to_owned(), state.clone());
        }
        let context = TraceContextPropagator::new().extract(&carrier);
        let span_context = context.span().span_context().clone();
        span_context.is_valid().then_some(span_context)
    }

    /// Link `span` to the span this context names (a link, not a parent:
    /// an attempt runs long after the enqueue's trace ended, and a retry
    /// later again).
    pub fn link(&self, span: &tracing::Span) {
        if let Some(span_context) = self.span_context() {
            span.add_link(span_context);
        }
    }
}
