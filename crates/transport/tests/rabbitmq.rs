//! RabbitMQ passes the conformance suite against a real broker
//! (`AMQP_URL`, default the local one).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_transport::Transport;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};

struct RabbitTarget;

fn url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[async_trait]
impl ConformanceTarget for RabbitTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        Arc::new(RabbitTransport::new(RabbitConfig::new(url())))
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let mut config = RabbitConfig::new("amqp://guest:guest@127.0.0.1:1/%2f");
        config.timeout = Duration::from_secs(5);
        Arc::new(RabbitTransport::new(config))
    }

    fn topic(&self, scenario: &str) -> String {
        format!("conformance.{scenario}.{}", uuid::Uuid::new_v4().simple())
    }
}

jobwire_transport::conformance_tests!(RabbitTarget);
