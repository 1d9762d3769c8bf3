//! `jobwire relay` as a real process: killed with SIGKILL in the middle of
//! a drain, it loses nothing (every row reaches the broker at least once);
//! given a wrong password, it says so at once.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use jobwire_test_support::{FreshDatabase, StopOnDrop};
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
use jobwire_transport::{SubscribeOptions, Transport};
use sqlx::PgPool;

mod common;
use common::JOBWIRE;

const ROWS: i64 = 10_000;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn start_relay(url: &str) -> StopOnDrop {
    Command::new(JOBWIRE)
        .args([
            "relay",
            "--transport",
            "rabbitmq",
            "--batch-size",
            "100",
            "--poll-ms",
            "200",
        ])
        .env("DATABASE_URL", url)
        .env("AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(StopOnDrop)
        .unwrap()
}

async fn outbox_len(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_outbox")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_mid_drain_loses_no_row() {
    let db = FreshDatabase::create().await;
    let migrate = Command::new(JOBWIRE)
        .arg("migrate")
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert!(migrate.status.success());
    let pool = db.pool().await;
    let topic = format!("crash-{}", uuid::Uuid::new_v4().simple());
    let ids: HashSet<i64> = sqlx::query_scalar(
        "INSERT INTO job_outbox (topic, message_key, payload)
         SELECT $1, 'k' || (n % 10), jsonb_build_object('n', n) FROM generate_series(1, $2) AS n
         RETURNING id",
    )
    .bind(&topic)
    .bind(ROWS)
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();

    let transport = RabbitTransport::new(RabbitConfig::new(amqp_url()));
    let mut subscriber = transport
        .subscribe(&topic, &SubscribeOptions::default())
        .await
        .unwrap();

    // Kill the relay once it has drained some, but not all, of the rows.
    let mut relay = start_relay(&db.url);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = outbox_len(&pool).await;
        if left < ROWS - 1500 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "relay made no progress"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.kill().unwrap(); // SIGKILL
    relay.wait().unwrap();
    let left_at_kill = outbox_len(&pool).await;
    assert!(
        left_at_kill > 0,
        "the relay finished before it could be killed mid-drain"
    );

    let mut relay = start_relay(&db.url);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while outbox_len(&pool).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "restarted relay did not drain"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    relay.kill().unwrap();
    relay.wait().unwrap();

    let mut seen = HashSet::new();
    let mut total = 0usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < ids.len() && tokio::time::Instant::now() < deadline {
        let batch = subscriber
            .receive(1000, Duration::from_secs(2))
            .await
            .unwrap();
        total += batch.len();
        seen.extend(batch.iter().filter_map(|d| d.outbox_id()));
        let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
        subscriber.ack(&receipts).await.unwrap();
    }
    // Drain the rest to count every duplicate.
    loop {
        let batch = subscriber
            .receive(1000, Duration::from_secs(1))
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        total += batch.len();
        let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
        subscriber.ack(&receipts).await.unwrap();
    }
    subscriber.close().await.unwrap();
    let lost = ids.difference(&seen).count();
    let duplicates = total - seen.len();
    println!(
        "relay crash: {ROWS} rows, killed with {left_at_kill} left, {total} messages received, {duplicates} duplicates, {lost} lost"
    );
    assert_eq!(lost, 0, "rows lost across the crash");
    assert!(seen.is_subset(&ids));
    pool.close().await;
    db.drop_database().await;
}

/// A relay given a wrong password says so when it starts, though it has no
/// row to publish (an idle relay otherwise never talks to the broker), and
/// keeps running: the rows wait in the outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_cannot_log_in_says_so_at_start() {
    use std::io::{BufRead, BufReader};

    let db = FreshDatabase::create().await;
    common::migrate(&db.url);
    let wrong_password = amqp_url().replacen("guest:guest@", "guest:not-the-password@", 1);
    assert_ne!(
        wrong_password,
        amqp_url(),
        "the test's URL has guest's login"
    );
    let mut relay = Command::new(JOBWIRE)
        .args(["relay", "--transport", "rabbitmq"])
        .env("DATABASE_URL", &db.url)
        .env("AMQP_URL", &wrong_password)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map(StopOnDrop)
        .unwrap();
    let stderr = relay.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let reported = loop {
        match received.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.contains("cannot reach the broker") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let still_running = relay.try_wait().unwrap().is_none();
    relay.kill().unwrap();
    relay.wait().unwrap();
    let reported = reported
        .unwrap_or_else(|| panic!("no report of the refused login in:\n{}", seen.join("\n")));
    assert!(reported.contains("ERROR"), "{reported}");
    assert!(
        reported.contains("ACCESS_REFUSED") || reported.contains("refused"),
        "the report gives the broker's reason: {reported}"
    );
    // Where the broker is, for the operator to check; never the password.
    let url = amqp_url();
    let after_login = url.rsplit_once('@').map_or(url.as_str(), |(_, rest)| rest);
    let host_and_port = after_login.split(['/', '?']).next().unwrap_or(after_login);
    assert!(
        reported.contains(&format!("address={host_and_port}")),
        "{reported}"
    );
    assert!(!reported.contains("not-the-password"), "{reported}");
    assert!(still_running, "the relay keeps running: {reported}");
    db.drop_database().await;
}
