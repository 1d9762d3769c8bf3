//! `/metrics` of real processes, scraped over real sockets while jobs run
//! through the PostgreSQL path and RabbitMQ: the counters and gauges move as
//! they must, one process exports the database gauges, the exposition
//! passes promtool's checker, and the alert rules in docs/alerts/ are valid
//! and behave as their unit tests say.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use jobwire_core::{JobState, NewJob, Scope};
use jobwire_test_support::{FlakyProxy, FreshDatabase, StopOnDrop, free_port};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

mod common;

use common::{JOBWIRE, migrate};

/// A `jobwire` process, stopped (SIGTERM, then waited for) when dropped.
struct Process {
    child: StopOnDrop,
}

impl Process {
    fn spawn(name: &str, url: &str, args: &[&str]) -> Self {
        let child = Command::new(JOBWIRE)
            .args(args)
            .env("DATABASE_URL", url)
            .env(
                "RUST_LOG",
                std::env::var("JOBWIRE_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(match std::env::var("JOBWIRE_TEST_LOG_DIR") {
                Ok(dir) => Stdio::from(std::fs::File::create(format!("{dir}/{name}.log")).unwrap()),
                Err(_) => Stdio::null(),
            })
            .spawn()
            .unwrap();
        Process {
            child: StopOnDrop(child),
        }
    }

    fn kill(&mut self) {
        self.child.0.kill().unwrap(); // SIGKILL
        self.child.0.wait().unwrap();
    }
}

/// One process's /metrics, as a client with a `read` token sees it.
struct Scraper {
    url: String,
    token: String,
    client: reqwest::Client,
}

impl Scraper {
    fn new(port: u16, token: &str) -> Self {
        Scraper {
            url: format!("http://127.0.0.1:{port}/metrics"),
            token: token.to_owned(),
            client: reqwest::Client::new(),
        }
    }

    /// The exposition, once the process answers; checked by promtool.
    async fn scrape(&self) -> Metrics {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let text = loop {
            match self
                .client
                .get(&self.url)
                .bearer_auth(&self.token)
                .send()
                .await
            {
                Ok(response) => {
                    assert_eq!(response.status(), 200, "GET {}", self.url);
                    let content_type = response.headers()["content-type"]
                        .to_str()
                        .unwrap()
                        .to_owned();
                    assert!(
                        content_type.starts_with("text/plain; version=0.0.4"),
                        "{content_type}"
                    );
                    break response.text().await.unwrap();
                }
                Err(err) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{} never answered: {err}",
                        self.url
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        promtool_check_metrics(&text);
        Metrics::parse(&text)
    }

    /// Scrape until `check` holds; fail with the last value after a minute.
    async fn until(&self, what: &str, check: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let metrics = self.scrape().await;
            if check(&metrics) {
                return metrics;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not seen at {} within a minute; last scrape:\n{}",
                self.url,
                metrics.text
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A parsed exposition.
struct Metrics {
    text: String,
    samples: Vec<prometheus_parse::Sample>,
}

impl Metrics {
    fn parse(text: &str) -> Self {
        let lines = text.lines().map(|line| Ok(line.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
        Metrics {
            text: text.to_owned(),
            samples: scrape.samples,
        }
    }

    /// The sum of every sample of `name` whose labels include `labels`;
    /// `None` when there is none.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for sample in self.samples.iter().filter(|sample| sample.metric == name) {
            let matches = labels
                .iter()
                .all(|(key, value)| sample.labels.get(key) == Some(*value));
            if matches {
                let value = match sample.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    prometheus_parse::Value::Histogram(ref buckets) => {
                        buckets.last().map(|bucket| bucket.count).unwrap_or(0.0)
                    }
                    prometheus_parse::Value::Summary(_) => continue,
                };
                *found.get_or_insert(0.0) += value;
            }
        }
        found
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// Every label set of `name`.
    fn series(&self, name: &str) -> Vec<HashMap<String, String>> {
        self.samples
            .iter()
            .filter(|sample| sample.metric == name)
            .map(|sample| {
                let mut labels = HashMap::new();
                for (key, value) in sample.labels.iter() {
                    labels.insert(key.clone(), value.clone());
                }
                labels
            })
            .collect()
    }
}

/// promtool (Debian's prometheus package, installed by scripts/services)
/// parses the exposition with Prometheus's own parser and lints it.
fn promtool_check_metrics(text: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (scripts/services promtool)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn enqueue(
    pool: &PgPool,
    job_type: &str,
    payload: serde_json::Value,
    queue: &str,
    count: usize,
) -> Vec<Uuid> {
    let jobs: Vec<NewJob> = (0..count)
        .map(|_| NewJob::new(job_type, payload.clone()).with_queue(queue))
        .collect();
    jobwire_core::enqueue_many(pool, &jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.job_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_jobs_through_both_paths_a_dead_worker_and_a_cut_broker() {
    let db = FreshDatabase::create().await;
    migrate(&db.url);
    let pool = db.pool().await;
    let token = jobwire_core::create_api_token(&pool, "prometheus", Scope::Read)
        .await
        .unwrap()
        .secret;
    let suffix = &Uuid::new_v4().simple().to_string()[..8];
    let (pg, mq, victim) = (
        format!("pg{suffix}"),
        format!("mq{suffix}"),
        format!("victim{suffix}"),
    );

    // Node A: API, relay and a RabbitMQ-path worker (through a proxy the
    // test can cut), and the only metrics process at first: the collector.
    let proxy = FlakyProxy::start("127.0.0.1:5672", true).await.unwrap();
    let amqp = format!("amqp://guest:guest@{}/%2f", proxy.addr);
    let port_a = free_port();
    let listen_a = format!("127.0.0.1:{port_a}");
    let mq_arg = format!("{mq}=8");
    let _node_a = Process::spawn(
        "metrics-a",
        &db.url,
        &[
            "run",
            "--transport",
            "rabbitmq",
            "--amqp-url",
            &amqp,
            "--queue",
            &mq_arg,
            "--listen",
            &listen_a,
            "--metrics-interval-ms",
            "200",
            "--no-sweeper",
            "--consumer-group",
            "metrics-test",
            "--shutdown-timeout-s",
            "1",
        ],
    );
    let a = Scraper::new(port_a, &token);
    let first = a
        .until("A leads the collection", |m| {
            m.value("jobwire_collector_leader", &[]) == 1.0
        })
        .await;
    assert!(
        first
            .get("jobwire_queue_jobs", &[("queue", &mq), ("state", "QUEUED")])
            .is_some(),
        "known queues are zero-filled:\n{}",
        first.text
    );

    // A worker that dies holding a job: its lease expires, unswept (no
    // process sweeps yet), and the gauge shows it.
    let victim_arg = format!("{victim}=1");
    let mut dying = Process::spawn(
        "metrics-victim",
        &db.url,
        &[
            "worker",
            "--queue",
            &victim_arg,
            "--lease-ms",
            "1000",
            "--worker-id",
            "victim",
            "--no-sweeper",
            "--no-reconciler",
            "--no-scheduler",
            "--no-retention",
        ],
    );
    let victim_job = enqueue(&pool, "sleep", json!({"ms": 2000}), &victim, 1).await[0];
    jobwire_test_support::wait_for_job(&pool, victim_job, Duration::from_secs(60), |job| {
        job.lease_owner.as_deref() == Some("victim")
    })
    .await
    .expect("the victim holds its job");
    dying.kill();
    a.until("the dead worker's lease shows as expired", |m| {
        m.value("jobwire_queue_lease_expired_jobs", &[("queue", &victim)]) == 1.0
    })
    .await;

    // Node B: a PostgreSQL-path worker that also sweeps, serving /metrics
    // on its own (--metrics-listen). A keeps the lead.
    let port_b = free_port();
    let listen_b = format!("127.0.0.1:{port_b}");
    let pg_arg = format!("{pg}=8");
    let _node_b = Process::spawn(
        "metrics-b",
        &db.url,
        &[
            "worker",
            "--queue",
            &pg_arg,
            "--queue",
            &victim_arg,
            "--metrics-listen",
            &listen_b,
            "--metrics-interval-ms",
            "200",
            "--sweep-interval-ms",
            "200",
            "--lease-ms",
            "3000",
            "--no-reconciler",
            "--shutdown-timeout-s",
            "1",
        ],
    );
    let b = Scraper::new(port_b, &token);
    b.until("B swept the expired lease", |m| {
        m.value("jobwire_leases_swept_total", &[("state", "RETRY_WAIT")]) == 1.0
    })
    .await;
    a.until("the swept lease is no longer expired", |m| {
        m.value("jobwire_queue_lease_expired_jobs", &[("queue", &victim)]) == 0.0
    })
    .await;
    b.until("the victim's job ran again on B", |m| {
        m.value(
            "jobwire_job_outcomes_total",
            &[("queue", &victim), ("outcome", "succeeded")],
        ) == 1.0
    })
    .await;

    // Jobs through both paths, and a poison job.
    let runs = 100;
    let mut ids = enqueue(&pool, "noop", json!({}), &pg, runs).await;
    ids.extend(enqueue(&pool, "noop", json!({}), &mq, runs).await);
    let poison = enqueue(&pool, "fail_fatal", json!({}), &pg, 1).await[0];
    jobwire_test_support::wait_for_all_finished(&pool, &ids, Duration::from_secs(60))
        .await
        .unwrap();
    jobwire_test_support::wait_for_state(&pool, poison, JobState::Failed, Duration::from_secs(60))
        .await
        .unwrap();
    let n = runs as f64;
    let on_b = b
        .until("B's outcomes", |m| {
            m.value(
                "jobwire_job_outcomes_total",
                &[
                    ("queue", &pg),
                    ("job_type", "noop"),
                    ("outcome", "succeeded"),
                ],
            ) == n
                && m.value(
                    "jobwire_job_outcomes_total",
                    &[
                        ("queue", &pg),
                        ("job_type", "fail_fatal"),
                        ("outcome", "failed"),
                    ],
                ) == 1.0
        })
        .await;
    assert_eq!(
        on_b.value(
            "jobwire_jobs_claimed_total",
            &[("queue", &pg), ("path", "postgres")]
        ),
        n + 1.0
    );
    assert_eq!(
        on_b.value(
            "jobwire_job_attempts_total",
            &[("queue", &pg), ("job_type", "noop")]
        ),
        n
    );
    assert_eq!(
        on_b.value(
            "jobwire_job_end_to_end_seconds",
            &[("queue", &pg), ("job_type", "noop")]
        ),
        n,
        "one end-to-end sample per job"
    );
    assert_eq!(
        on_b.value(
            "jobwire_job_queue_wait_seconds",
            &[("queue", &pg), ("job_type", "noop")]
        ),
        n
    );
    assert_eq!(
        on_b.value(
            "jobwire_job_run_seconds",
            &[("queue", &pg), ("job_type", "noop")]
        ),
        n
    );
    assert!(
        on_b.series("jobwire_queue_jobs").is_empty(),
        "only the elected collector exports database gauges:\n{}",
        on_b.text
    );
    assert_eq!(on_b.value("jobwire_collector_leader", &[]), 0.0);

    let on_a = a
        .until("A's outcomes", |m| {
            m.value(
                "jobwire_job_outcomes_total",
                &[("queue", &mq), ("outcome", "succeeded")],
            ) == n
        })
        .await;
    assert_eq!(
        on_a.value("jobwire_jobs_claimed_total", &[("queue", &mq)]),
        n
    );
    assert!(on_a.value("jobwire_wake_ups_total", &[("result", "claimed")]) >= n);
    assert!(
        on_a.value(
            "jobwire_relay_published_total",
            &[("transport", "rabbitmq")]
        ) >= n
    );
    assert!(
        on_a.value(
            "jobwire_relay_publish_seconds",
            &[("transport", "rabbitmq")]
        ) >= 1.0
    );
    let gauges = a
        .until("depth falls to zero, the poison job shows", |m| {
            m.value("jobwire_queue_jobs", &[("queue", &pg), ("state", "QUEUED")]) == 0.0
                && m.value("jobwire_queue_jobs", &[("queue", &mq), ("state", "QUEUED")]) == 0.0
                && m.value(
                    "jobwire_queue_jobs",
                    &[("queue", &pg), ("state", "SUCCEEDED")],
                ) == n
                && m.value(
                    "jobwire_failed_jobs",
                    &[("job_type", "fail_fatal"), ("error_code", "FATAL_DEMO")],
                ) == 1.0
        })
        .await;
    assert_eq!(
        gauges.value(
            "jobwire_queue_oldest_runnable_age_seconds",
            &[("queue", &pg)]
        ),
        0.0
    );
    assert!(
        gauges
            .get("jobwire_table_dead_tuples", &[("table", "jobs")])
            .is_some(),
        "{}",
        gauges.text
    );

    // A cancel request on a running job: its latency is measured.
    let sleeper = enqueue(&pool, "sleep", json!({"ms": 30000}), &pg, 1).await[0];
    jobwire_test_support::wait_for_state(
        &pool,
        sleeper,
        JobState::Running,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    jobwire_core::request_cancel(&pool, sleeper, "metrics-test")
        .await
        .unwrap();
    jobwire_test_support::wait_for_state(
        &pool,
        sleeper,
        JobState::Cancelled,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    b.until("the cancellation latency is recorded", |m| {
        m.value("jobwire_job_cancel_latency_seconds", &[("queue", &pg)]) == 1.0
    })
    .await;

    // The broker goes away: the outbox's oldest due row ages; it comes back
    // and the age falls to zero as the relay catches up.
    proxy.set_up(false);
    let stranded = enqueue(&pool, "noop", json!({}), &mq, 5).await;
    a.until("the outbox ages while the broker is cut", |m| {
        m.value("jobwire_outbox_oldest_due_age_seconds", &[]) > 1.0
            && m.value("jobwire_outbox_due_rows", &[]) >= 5.0
    })
    .await;
    proxy.set_up(true);
    a.until("the outbox drains when the broker is back", |m| {
        m.value("jobwire_outbox_oldest_due_age_seconds", &[]) == 0.0
            && m.value("jobwire_outbox_rows", &[]) == 0.0
    })
    .await;
    jobwire_test_support::wait_for_all_finished(&pool, &stranded, Duration::from_secs(60))
        .await
        .unwrap();

    // The dead-letter group goes (archived): its gauge reads 0 at once,
    // not its old count until the idle timeout removes it.
    jobwire_core::archive_finished(&pool, Duration::from_secs(86_400), Duration::ZERO, 100)
        .await
        .unwrap();
    a.until("the archived dead-letter group reads zero", |m| {
        m.get(
            "jobwire_failed_jobs",
            &[("job_type", "fail_fatal"), ("error_code", "FATAL_DEMO")],
        ) == Some(0.0)
    })
    .await;

    // Without a token: refused, with the API and alone.
    for port in [port_a, port_b] {
        let refused = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "port {port}");
    }
    pool.close().await;
    drop((_node_a, _node_b));
    db.drop_database().await;
}

/// The alert rules operators load are valid, and fire (or stay quiet) as
/// their unit tests say.
#[test]
fn alert_rules_are_valid_and_fire_as_documented() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/alerts");
    for args in [
        vec!["check", "rules", "jobwire.rules.yml"],
        vec!["test", "rules", "jobwire.rules.test.yml"],
    ] {
        let output = Command::new("promtool")
            .args(&args)
            .current_dir(root)
            .output()
            .expect("promtool is installed (scripts/services promtool)");
        assert!(
            output.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
