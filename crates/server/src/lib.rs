//! jobwire-server: the composition point. A [`Node`] owns everything
//! long-running in one process — the worker, any number of relay lanes, the
//! maintenance loops and the HTTP API with its dashboard — and starts and stops them together
//! with one staged shutdown. `jobwire run`, the demo, the
//! benchmark and the tests all build their processes with it; nothing else
//! hand-wires cancellation tokens and join handles.
#![warn(missing_docs)]

mod api;
mod http;
pub mod metrics;
mod node;
mod report;
mod ui;

pub use api::{metrics_router, openapi, router};
pub use http::HttpServer;
pub use node::{Node, NodeError, RunningNode};
pub use report::NodeReport;

/// The README's Rust examples, compiled by `cargo test` so they cannot drift
/// from the code.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;
