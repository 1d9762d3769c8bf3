//! Broker-path workers as real processes: one killed with SIGKILL mid-job,
//! one frozen (SIGSTOP) until its jobs were reclaimed, then thawed.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jobwire_core::{JobState, NewJob};
use jobwire_test_support::{FreshDatabase, StopOnDrop, wait_for_count};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

mod common;

use common::{JOBWIRE, migrate};

/// `jobwire run`: relay and worker in one process.
fn run_worker(url: &str, queue: &str, worker_id: &str, sweeper: bool) -> StopOnDrop {
    spawn_worker("run", url, queue, worker_id, sweeper)
}

/// `jobwire <command>` (`run` or `worker`) on `queue`, over RabbitMQ.
fn spawn_worker(
    command: &str,
    url: &str,
    queue: &str,
    worker_id: &str,
    sweeper: bool,
) -> StopOnDrop {
    let queue_arg = format!("{queue}=4");
    let mut args = vec![
        command,
        "--transport",
        "rabbitmq",
        "--queue",
        &queue_arg,
        "--lease-ms",
        "1500",
        "--worker-id",
        worker_id,
        "--consumer-group",
        "cli-tests",
        "--sweep-interval-ms",
        "200",
        "--shutdown-timeout-s",
        "1",
        // A frozen worker's connection stays open and can absorb wake-ups up
        // to its prefetch; the reconciler re-wakes those jobs quickly.
        "--reconcile-grace-s",
        "1",
        "--reconcile-interval-ms",
        "300",
    ];
    if !sweeper {
        // The worker that will die or freeze: it sweeps and reconciles nothing.
        args.extend(["--no-sweeper", "--no-reconciler"]);
    }
    Command::new(JOBWIRE)
        .args(args)
        .env("DATABASE_URL", url)
        .env(
            "RUST_LOG",
            std::env::var("JOBWIRE_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(match std::env::var("JOBWIRE_TEST_LOG_DIR") {
            Ok(dir) => {
                Stdio::from(std::fs::File::create(format!("{dir}/{worker_id}.log")).unwrap())
            }
            Err(_) => Stdio::null(),
        })
        .spawn()
        .map(StopOnDrop)
        .unwrap()
}

async fn wait_until(pool: &PgPool, what: &str, query: &str, bind: &str, expected: i64) {
    wait_for_count(pool, query, bind, expected, Duration::from_secs(60))
        .await
        .unwrap_or_else(|err| panic!("{what}: {err}"));
}

/// A worker declares its queue broker-dispatched when it starts.
async fn wait_for_broker_queue(pool: &PgPool, queue: &str) {
    wait_until(
        pool,
        "queue declared",
        "SELECT count(*) FROM job_queues WHERE queue = $1 AND dispatch = 'broker'",
        queue,
        1,
    )
    .await;
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn enqueue_sleepers(pool: &PgPool, queue: &str, count: usize) -> Vec<Uuid> {
    let jobs: Vec<NewJob> = (0..count)
        .map(|_| NewJob::new("sleep", json!({"ms": 2500})).with_queue(queue))
        .collect();
    jobwire_core::enqueue_many(pool, &jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.job_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_broker_workers_jobs_are_swept_rewoken_and_completed() {
    let db = FreshDatabase::create().await;
    migrate(&db.url);
    let pool = db.pool().await;
    let queue = format!("kill{}", &Uuid::new_v4().simple().to_string()[..8]);
    let mut victim = run_worker(&db.url, &queue, "victim", false);
    wait_for_broker_queue(&pool, &queue).await;
    let ids = enqueue_sleepers(&pool, &queue, 3).await;
    wait_until(
        &pool,
        "victim holds the jobs",
        "SELECT count(*) FROM jobs WHERE queue = $1 AND lease_owner = 'victim'",
        &queue,
        3,
    )
    .await;
    // Its sessions say what they are, for an operator reading
    // pg_stat_activity.
    wait_until(
        &pool,
        "the worker's sessions named after its command",
        "SELECT least(count(*), 1) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = $1",
        "jobwire run",
        1,
    )
    .await;
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();

    let mut rescuer = run_worker(&db.url, &queue, "rescuer", true);
    wait_until(
        &pool,
        "jobs completed",
        "SELECT count(*) FROM jobs WHERE queue = $1 AND state = 'SUCCEEDED'",
        &queue,
        3,
    )
    .await;
    signal(&rescuer, "TERM");
    rescuer.wait().unwrap();
    for id in ids {
        let status = jobwire_core::job_status(&pool, id).await.unwrap();
        assert_eq!(status.state, JobState::Succeeded);
        assert_eq!(status.attempt_count, 2, "the killed attempt counts");
        assert_eq!(status.last_error_code.as_deref(), Some("LEASE_EXPIRED"));
    }
    pool.close().await;
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_worker_that_wakes_up_late_changes_nothing() {
    let db = FreshDatabase::create().await;
    migrate(&db.url);
    let pool = db.pool().await;
    let queue = format!("stale{}", &Uuid::new_v4().simple().to_string()[..8]);
    // The process that will freeze runs only a worker (no relay, no
    // reconciler): what it holds when frozen is exactly a worker's state.
    let mut relay = Command::new(JOBWIRE)
        .args(["relay", "--transport", "rabbitmq", "--poll-ms", "200"])
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(StopOnDrop)
        .unwrap();
    let mut sleeper = spawn_worker("worker", &db.url, &queue, "sleeper", false);
    wait_for_broker_queue(&pool, &queue).await;
    let ids = enqueue_sleepers(&pool, &queue, 2).await;
    wait_until(
        &pool,
        "sleeper holds the jobs",
        "SELECT count(*) FROM jobs WHERE queue = $1 AND lease_owner = 'sleeper'",
        &queue,
        2,
    )
    .await;
    signal(&sleeper, "STOP"); // frozen: no heartbeats, no writes

    let mut rescuer = run_worker(&db.url, &queue, "rescuer", true);
    // Reclaimed by the rescuer (monotonic: the rescuer may already have
    // finished one job while the other's wake-up is still on its way).
    wait_until(
        &pool,
        "reclaimed",
        "SELECT count(*) FROM jobs WHERE queue = $1 AND lease_generation >= 2",
        &queue,
        2,
    )
    .await;
    // Thaw the stale worker while the rescuer runs the jobs: its handlers
    // finish, and every write it tries is fenced.
    signal(&sleeper, "CONT");
    wait_until(
        &pool,
        "jobs completed",
        "SELECT count(*) FROM jobs WHERE queue = $1 AND state = 'SUCCEEDED'",
        &queue,
        2,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    signal(&sleeper, "TERM");
    let (_, stdout) = sleeper.stdout_at_exit().unwrap();
    signal(&rescuer, "TERM");
    rescuer.wait().unwrap();
    relay.kill().unwrap();
    relay.wait().unwrap();

    let report: serde_json::Value = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|value| value.get("worker").filter(|w| w.is_object()).cloned())
        .unwrap_or_else(|| panic!("no worker report in: {stdout}"));
    let rejected = report["lease_lost"].as_u64().unwrap() + report["fenced"].as_u64().unwrap();
    assert!(
        rejected >= 2,
        "the stale worker's writes were not fenced: {report}"
    );
    assert_eq!(report["succeeded"], 0, "{report}");
    for id in ids {
        let status = jobwire_core::job_status(&pool, id).await.unwrap();
        assert_eq!(status.state, JobState::Succeeded);
        assert_eq!(
            status.lease_generation.0, 2,
            "the rescuer's claim is the last"
        );
        assert_eq!(status.attempt_count, 2);
    }
    pool.close().await;
    db.drop_database().await;
}

/// A Kafka worker whose only slot runs a long job, and a second worker
/// started to help with the queue: the helper starts the queue's next jobs
/// while the long one still runs. While every slot is busy a worker holds
/// its subscription (it keeps polling, keeping what arrives); a worker
/// that went silent instead held up the rebalance that gives the helper
/// its share of the topic's partitions until the long job ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_kafka_worker_lets_a_helper_take_its_share() {
    let db = FreshDatabase::create().await;
    migrate(&db.url);
    let pool = db.pool().await;
    let queue = format!("busy{}", &Uuid::new_v4().simple().to_string()[..8]);
    // A group prefix of its own: no other test's members in its groups.
    let group = format!("cli-tests-{}", Uuid::new_v4().simple());
    let kafka_worker = |command: &str, slots: usize, worker_id: &str| {
        Command::new(JOBWIRE)
            .args([
                command,
                "--transport",
                "kafka",
                "--queue",
                &format!("{queue}={slots}"),
                "--worker-id",
                worker_id,
                "--consumer-group",
                &group,
                "--shutdown-timeout-s",
                "1",
            ])
            .env("DATABASE_URL", &db.url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(StopOnDrop)
            .unwrap()
    };

    let busy = kafka_worker("run", 1, "busy");
    wait_for_broker_queue(&pool, &queue).await;
    let long = NewJob::new("sleep", json!({"ms": 40_000})).with_queue(&queue);
    let long = jobwire_core::enqueue(&pool, &long).await.unwrap().job_id;
    wait_until(
        &pool,
        "the busy worker runs the long job",
        "SELECT count(*) FROM jobs WHERE queue = $1 AND state = 'RUNNING' AND lease_owner = 'busy'",
        &queue,
        1,
    )
    .await;

    let helper = kafka_worker("worker", 4, "helper");
    // Forty, so that some of their wake-ups (keyed by job id) surely land on
    // the helper's share of the topic's four partitions.
    let short: Vec<NewJob> = (0..40)
        .map(|_| NewJob::new("sleep", json!({"ms": 10})).with_queue(&queue))
        .collect();
    jobwire_core::enqueue_many(&pool, &short).await.unwrap();
    // The wake-ups on the partitions the helper gets reach it; those on the
    // busy worker's own partitions wait for its slot. So some of the short
    // jobs, not all, finish while the long one runs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (short_done, long_state): (i64, String) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM jobs WHERE queue = $1 AND job_id <> $2
                     AND state = 'SUCCEEDED'),
                    (SELECT state FROM jobs WHERE job_id = $2)",
        )
        .bind(&queue)
        .bind(long)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            long_state, "RUNNING",
            "the long job ended before the helper finished any job ({short_done} done): \
             the busy worker held the group's rebalance up"
        );
        if short_done >= 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the helper finished no job in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    drop(helper); // stopped, as is the busy worker below
    drop(busy);
    pool.close().await;
    db.drop_database().await;
}
