//! jobwire-tests: workspace-level scenarios that cross crates (the relay, the
//! worker and every broker together) live here; each crate's own tests live
//! beside it, and the shared helpers are in `jobwire-test-support`.
