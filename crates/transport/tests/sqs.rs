//! SQS, standard and FIFO queues, passes the conformance suite against a real
//! SQS server (`SQS_ENDPOINT`, default the local emulator).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::sqs::{SqsConfig, SqsTransport};
use jobwire_transport::{SubscribeOptions, Transport};

struct SqsTarget {
    fifo: bool,
}

fn endpoint() -> String {
    std::env::var("SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

#[async_trait]
impl ConformanceTarget for SqsTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        let mut config = SqsConfig::local(endpoint());
        config.fifo = self.fifo;
        Arc::new(SqsTransport::new(config).await)
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let mut config = SqsConfig::local("http://127.0.0.1:1");
        config.fifo = self.fifo;
        config.timeout = Duration::from_secs(5);
        Arc::new(SqsTransport::new(config).await)
    }

    fn topic(&self, scenario: &str) -> String {
        // A fresh queue per scenario keeps the emulator fast.
        format!(
            "conf-{scenario}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        )
    }

    fn subscribe_options(&self) -> SubscribeOptions {
        SubscribeOptions {
            visibility_timeout: Duration::from_secs(30),
            ..SubscribeOptions::default()
        }
    }
}

mod standard {
    use super::SqsTarget;
    jobwire_transport::conformance_tests!(SqsTarget { fifo: false });
}

mod fifo {
    use super::SqsTarget;
    jobwire_transport::conformance_tests!(SqsTarget { fifo: true });
}
