//! The in-memory transport passes the whole conformance suite.

use std::sync::Arc;

use async_trait::async_trait;
use jobwire_transport::Transport;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::memory::MemoryTransport;

#[derive(Default)]
struct MemoryTarget {
    transport: MemoryTransport,
}

#[async_trait]
impl ConformanceTarget for MemoryTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        Arc::new(self.transport.clone())
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let down = MemoryTransport::default();
        down.set_available(false);
        Arc::new(down)
    }

    fn topic(&self, scenario: &str) -> String {
        format!("{scenario}-{}", uuid::Uuid::new_v4().simple())
    }
}

jobwire_transport::conformance_tests!(MemoryTarget::default());
