//! The operator dashboard in a real headless Chromium, against a real
//! PostgreSQL, a real worker and the HTTP server on a loopback port: log
//! in, read the overview, find and open jobs, cancel one, retry a
//! dead-letter group whose jobs then succeed, pause a queue and see it stop
//! claiming, pause a schedule, log out and be refused. Then what must not
//! happen: a job's `<script>` running, a read-only token changing anything,
//! a form without its CSRF token being obeyed. And the tenants of a capped
//! queue: who holds its slots, who waits, and what each may do.
//!
//! Every page is also photographed at 1280×800 and 390×844 (see
//! `browser/mod.rs` for where the screenshots go) and checked not to be
//! wider than its screen.

mod browser;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use browser::{Browser, Screen};
use chrono::Utc;
use fantoccini::Locator;
use jobwire_consumer::{HandlerRegistry, JobContext, JobError, QueueConfig, Worker};
use jobwire_core::{Dispatch, JobState, NewJob, ScheduleSpec, Scope};
use jobwire_relay::{Relay, RelayConfig};
use jobwire_server::{HttpServer, Node, RunningNode};
use jobwire_test_support::brokers;
use jobwire_test_support::jobs::{wait_for_state, wake_ups_for};
use jobwire_test_support::wait_for_count;
use jobwire_test_support::worker::test_worker_config;
use jobwire_transport::Transport;
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// A failure message written to look like markup: it must show as text.
const HOSTILE_ERROR: &str =
    "<script>document.title='pwned'</script> template \"header\" failed: 'x' < 'y' & <b>done</b>";
const HOSTILE_TITLE: &str = "<script>document.title='pwned'</script>";

/// A worker and the HTTP server over `pool`, one node; the webhook
/// endpoint answers 503 until `endpoint_up` is set. With `broker_queue`,
/// that queue is dispatched through RabbitMQ (a topic of its own), with a
/// relay in the node.
async fn start_node(
    pool: &PgPool,
    endpoint_up: Arc<AtomicBool>,
    broker_queue: Option<&str>,
) -> (RunningNode, String) {
    let mut registry = HandlerRegistry::new();
    registry.register("deliver_webhook", move |_ctx: JobContext| {
        let up = endpoint_up.load(Ordering::SeqCst);
        async move {
            if up {
                Ok(())
            } else {
                Err(JobError::fatal(
                    "HTTP_503",
                    "POST https://hooks.example/orders answered 503 Service Unavailable",
                ))
            }
        }
    });
    registry.register("render_report", |_ctx: JobContext| async {
        Err(JobError::fatal("BAD_TEMPLATE", HOSTILE_ERROR))
    });
    registry.register("noop", |_ctx: JobContext| async { Ok(()) });
    let mut config = test_worker_config("default", 4);
    config.queues.push(QueueConfig::new("webhooks", 4));
    if let Some(queue) = broker_queue {
        config.queues.push(QueueConfig::new(queue, 4));
    }
    let mut worker = Worker::new(pool.clone(), registry, config);
    let http = HttpServer::bind("127.0.0.1:0".parse().unwrap(), pool.clone())
        .await
        .unwrap();
    let base = format!("http://{}", http.local_addr().unwrap());
    let mut node = Node::new(pool.clone());
    if let Some(queue) = broker_queue {
        let topic = format!("jobwire-dashboard-{}", Uuid::now_v7().simple());
        jobwire_core::set_queue_dispatch(pool, queue, &Dispatch::Broker { topic })
            .await
            .unwrap();
        let transport: Arc<dyn Transport> =
            Arc::new(RabbitTransport::new(RabbitConfig::new(brokers::amqp_url())));
        let relay_config = RelayConfig {
            poll_interval: Duration::from_millis(100),
            ..RelayConfig::default()
        };
        worker = worker.with_transport(transport.clone());
        node = node
            .with_relay(Relay::new(pool.clone(), transport.clone(), relay_config))
            .closing(transport);
    }
    let node = node.with_worker(worker).with_http(http).start().unwrap();
    (node, base)
}

async fn enqueue(pool: &PgPool, job: NewJob) -> Uuid {
    jobwire_core::enqueue(pool, &job).await.unwrap().job_id
}

/// What the dashboard has to show: dead letters (five webhooks, one job
/// whose payload and error are markup), jobs that succeeded (some through
/// the broker queue `bulk` when there is one), one waiting an hour, and a
/// schedule.
struct Seeded {
    webhooks: Vec<Uuid>,
    hostile: Uuid,
    delayed: Uuid,
}

async fn seed(pool: &PgPool, broker_queue: bool) -> Seeded {
    let mut webhooks = Vec::new();
    for order in 0..5 {
        let job = NewJob::new("deliver_webhook", json!({"orderId": 7000 + order}))
            .with_queue("webhooks")
            .with_max_attempts(1);
        webhooks.push(enqueue(pool, job).await);
    }
    let hostile = enqueue(
        pool,
        NewJob::new(
            "render_report",
            json!({"title": HOSTILE_TITLE, "note": "\"double\" & 'single' <i>quotes</i>"}),
        )
        .with_tenant(HOSTILE_TITLE)
        .with_max_attempts(1),
    )
    .await;
    let mut done = Vec::new();
    for i in 0..8 {
        done.push(enqueue(pool, NewJob::new("noop", json!({"n": i}))).await);
    }
    if broker_queue {
        for i in 0..4 {
            let job = NewJob::new("noop", json!({"n": i})).with_queue("bulk");
            done.push(enqueue(pool, job).await);
        }
    }
    let delayed = enqueue(
        pool,
        NewJob::new("noop", json!({"reminder": true}))
            .with_run_at(Utc::now() + chrono::TimeDelta::hours(1)),
    )
    .await;
    let schedule = ScheduleSpec::new(
        "nightly-report",
        "30 2 * * *",
        "Europe/Berlin",
        NewJob::new("noop", json!({"report": "nightly"})),
    );
    jobwire_core::put_schedule(pool, &schedule).await.unwrap();
    for id in webhooks.iter().chain([&hostile]) {
        wait_for_state(pool, *id, JobState::Failed, WAIT)
            .await
            .unwrap();
    }
    for id in &done {
        wait_for_state(pool, *id, JobState::Succeeded, WAIT)
            .await
            .unwrap();
    }
    Seeded {
        webhooks,
        hostile,
        delayed,
    }
}

async fn token(pool: &PgPool, name: &str, scope: Scope) -> String {
    jobwire_core::create_api_token(pool, name, scope)
        .await
        .unwrap()
        .secret
}

/// Log in through the form, as a person would.
async fn log_in(browser: &Browser, base: &str, token: &str) {
    browser.goto(&format!("{base}/ui")).await;
    assert_eq!(
        browser.path().await,
        "/ui/login",
        "no session: the login form"
    );
    browser.fill("#token", token).await;
    browser.click("form[action='/ui/login'] button").await;
    assert_eq!(browser.path().await, "/ui");
}

/// Photograph the page and check it fits its screen.
async fn look(browser: &Browser, name: &str) {
    assert!(
        !browser.overflows_horizontally().await,
        "{name} is wider than the screen"
    );
    browser.screenshot(name).await;
}

async fn job_state(pool: &PgPool, id: Uuid) -> JobState {
    jobwire_core::job_status(pool, id).await.unwrap().state
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_operator_works_the_dashboard_end_to_end(pool: PgPool) {
    let endpoint_up = Arc::new(AtomicBool::new(false));
    let (mut node, base) = start_node(&pool, endpoint_up.clone(), Some("bulk")).await;
    let seeded = seed(&pool, true).await;
    let admin = token(&pool, "night-operator", Scope::Admin).await;
    let browser = Browser::start(Screen::Laptop).await;

    // Log in.
    browser.goto(&format!("{base}/ui")).await;
    assert_eq!(browser.path().await, "/ui/login");
    look(&browser, "login").await;
    log_in(&browser, &base, &admin).await;

    // The overview: both queues, their paths and depths, the dead letters.
    let overview = browser.body_text().await;
    assert!(overview.contains("night-operator"), "{overview}");
    for queue in ["default", "webhooks"] {
        assert!(
            overview.contains(queue),
            "queue {queue} missing: {overview}"
        );
    }
    assert!(overview.contains("PostgreSQL"), "{overview}");
    assert_eq!(
        browser.text(".card:nth-child(4) .value").await,
        "6",
        "dead letters"
    );
    assert_eq!(browser.count("svg.spark").await, 3, "a chart per queue");
    look(&browser, "overview").await;

    // Jobs, filtered by state FAILED.
    browser.click_link("Jobs").await;
    browser
        .client
        .find(Locator::Css("#f-state"))
        .await
        .unwrap()
        .select_by_value("FAILED")
        .await
        .unwrap();
    browser.click("form.filters button").await;
    let url = browser.client.current_url().await.unwrap();
    assert!(url.query().unwrap().contains("state=FAILED"), "{url}");
    assert_eq!(browser.count("#jobs tbody a.job-id").await, 6);
    let states: Vec<String> = futures::future::join_all(
        browser
            .client
            .find_all(Locator::Css("#jobs tbody .badge"))
            .await
            .unwrap()
            .iter()
            .map(|badge| async move { badge.text().await.unwrap() }),
    )
    .await;
    assert!(states.iter().all(|state| state == "FAILED"), "{states:?}");
    look(&browser, "jobs").await;

    // Open a job: every field, its error.
    let webhook = seeded.webhooks[0];
    browser
        .click(&format!("#jobs a[href='/ui/jobs/{webhook}']"))
        .await;
    assert_eq!(browser.path().await, format!("/ui/jobs/{webhook}"));
    assert_eq!(browser.text("#job-state").await, "FAILED");
    assert_eq!(browser.text("#last-error-code").await, "HTTP_503");
    assert!(browser.text("#payload").await.contains("\"orderId\": 7000"));
    look(&browser, "job").await;

    // Cancel a queued job, confirming first.
    browser
        .goto(&format!("{base}/ui/jobs/{}", seeded.delayed))
        .await;
    assert_eq!(browser.text("#job-state").await, "QUEUED");
    browser.click_link("Cancel…").await;
    assert_eq!(
        browser.path().await,
        format!("/ui/jobs/{}/cancel", seeded.delayed)
    );
    assert_eq!(
        job_state(&pool, seeded.delayed).await,
        JobState::Queued,
        "a GET changes nothing"
    );
    look(&browser, "confirm-cancel").await;
    browser.click("form.actions button").await;
    assert_eq!(browser.text("#job-state").await, "CANCELLED");
    assert_eq!(browser.text(".notice").await, "Cancelled.");
    assert_eq!(job_state(&pool, seeded.delayed).await, JobState::Cancelled);
    assert_eq!(
        browser
            .text("#audit tbody tr:last-child td:nth-child(2)")
            .await,
        "cancel"
    );
    assert_eq!(
        browser
            .text("#audit tbody tr:last-child td:nth-child(3)")
            .await,
        "night-operator"
    );

    // Retry the webhook group once the endpoint is back: its count drops
    // to zero and the jobs run.
    browser.click_link("Dead letters").await;
    let group = "#dead-letter-groups tr[data-type='deliver_webhook'][data-code='HTTP_503']";
    assert_eq!(browser.text(&format!("{group} .group-count")).await, "5");
    look(&browser, "dead-letters").await;
    endpoint_up.store(true, Ordering::SeqCst);
    browser.click(&format!("{group} a.retry")).await;
    assert!(
        browser
            .text("#retry-summary")
            .await
            .starts_with("Retry 5 FAILED jobs of type deliver_webhook"),
    );
    look(&browser, "confirm-retry").await;
    browser.click("form.actions button").await;
    assert_eq!(browser.path().await, "/ui/dead-letters");
    assert_eq!(
        browser.text(".notice").await,
        "Requeued 5 jobs; they run again now."
    );
    assert_eq!(browser.count(group).await, 0, "the group is gone");
    for id in &seeded.webhooks {
        wait_for_state(&pool, *id, JobState::Succeeded, WAIT)
            .await
            .unwrap();
    }
    browser
        .goto(&format!(
            "{base}/ui/jobs?state=SUCCEEDED&type=deliver_webhook"
        ))
        .await;
    assert_eq!(
        browser.count("#jobs tbody a.job-id").await,
        5,
        "the retried jobs ran"
    );
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_audit WHERE action = 'replay' AND actor = 'night-operator'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(audited, 5);

    // Pause a queue on each path: it stops claiming; resume: it runs.
    browser.click_link("Queues").await;
    for queue in ["default", "bulk"] {
        let row = format!("#queues tr[data-queue='{queue}']");
        browser.click(&format!("{row} button")).await;
        assert_eq!(browser.text(&format!("{row} .queue-state")).await, "paused");
        // Enqueued in a transaction that shows its outbox row (on the
        // broker path) before the relay can see it.
        let mut tx = pool.begin().await.unwrap();
        let held = jobwire_core::enqueue(
            &mut *tx,
            &NewJob::new("noop", json!({"while": "paused"})).with_queue(queue),
        )
        .await
        .unwrap()
        .job_id;
        let written: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM job_outbox WHERE payload->>'job_id' = $1::text",
        )
        .bind(held)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        assert_eq!(written, i64::from(queue == "bulk"), "{queue}: its wake-up");
        tx.commit().await.unwrap();
        // Proof that the worker kept working meanwhile: a job enqueued
        // after it on an active queue runs; on the broker path, the paused
        // job's wake-up went out to the broker. Then fifteen more of the
        // worker's 100 ms polls go by.
        let control = enqueue(
            &pool,
            NewJob::new("noop", json!({"control": true})).with_queue("webhooks"),
        )
        .await;
        wait_for_state(&pool, control, JobState::Succeeded, WAIT)
            .await
            .unwrap();
        if queue == "bulk" {
            wait_until_published(&pool, held).await;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let status = jobwire_core::job_status(&pool, held).await.unwrap();
        assert_eq!(
            status.state,
            JobState::Queued,
            "paused {queue} claimed a job"
        );
        assert_eq!(status.attempt_count, 0);
        browser.goto(&format!("{base}/ui/queues")).await;
        assert_eq!(browser.text(&format!("{row} td:nth-child(4)")).await, "1");
        if queue == "bulk" {
            look(&browser, "queues").await;
        }
        browser.click(&format!("{row} button")).await;
        assert_eq!(browser.text(&format!("{row} .queue-state")).await, "active");
        wait_for_state(&pool, held, JobState::Succeeded, WAIT)
            .await
            .unwrap();
    }

    // Schedules: cron, zone, the next three fire times; pause it.
    browser.click_link("Schedules").await;
    let schedule_row = "#schedules tr[data-schedule='nightly-report']";
    let row = browser.text(schedule_row).await;
    assert!(
        row.contains("30 2 * * *") && row.contains("Europe/Berlin"),
        "{row}"
    );
    // In the schedule's own zone to the second (CET or CEST), as in UTC.
    assert!(row.contains("02:30:00 CE"), "{row}");
    assert_eq!(
        browser
            .count(&format!("{schedule_row} td:nth-child(5) time"))
            .await,
        3,
        "three fire times"
    );
    look(&browser, "schedules").await;
    // The same pages on a phone.
    let phone = Browser::start(Screen::Phone).await;
    log_in(&phone, &base, &admin).await;
    look(&phone, "overview").await;
    for (name, path) in [
        ("jobs", "/ui/jobs?state=FAILED".to_owned()),
        ("job", format!("/ui/jobs/{}", seeded.hostile)),
        ("dead-letters", "/ui/dead-letters".to_owned()),
        ("queues", "/ui/queues".to_owned()),
        ("schedules", "/ui/schedules".to_owned()),
    ] {
        phone.goto(&format!("{base}{path}")).await;
        look(&phone, name).await;
    }
    phone.close().await;

    // Pause the schedule.
    browser.click(&format!("{schedule_row} button")).await;
    assert_eq!(
        browser
            .text(&format!("{schedule_row} .schedule-state"))
            .await,
        "paused"
    );
    let schedule = jobwire_core::get_schedule(&pool, "nightly-report")
        .await
        .unwrap()
        .unwrap();
    assert!(schedule.paused);

    // Log out, and be refused: by the browser, and with the old cookie.
    let session = browser
        .client
        .get_named_cookie("jobwire_session")
        .await
        .unwrap();
    browser.click("form.who button").await;
    assert_eq!(browser.path().await, "/ui/login");
    assert_eq!(browser.text(".notice").await, "You are logged out.");
    browser.goto(&format!("{base}/ui/jobs")).await;
    assert_eq!(browser.path().await, "/ui/login");
    let replayed_cookie = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{base}/ui"))
        .header("Cookie", format!("jobwire_session={}", session.value()))
        .send()
        .await
        .unwrap();
    assert_eq!(replayed_cookie.status(), 303);
    assert_eq!(replayed_cookie.headers()["location"], "/ui/login");

    browser.close().await;
    node.stop().await.unwrap();
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_jobs_markup_renders_as_text(pool: PgPool) {
    let (mut node, base) = start_node(&pool, Arc::new(AtomicBool::new(false)), None).await;
    let seeded = seed(&pool, false).await;
    let reader = token(&pool, "auditor", Scope::Read).await;
    let browser = Browser::start(Screen::Laptop).await;
    log_in(&browser, &base, &reader).await;

    for path in [
        format!("/ui/jobs/{}", seeded.hostile),
        "/ui/jobs?state=FAILED".to_owned(),
        "/ui/dead-letters".to_owned(),
    ] {
        browser.goto(&format!("{base}{path}")).await;
        let title: String = browser.client.title().await.unwrap();
        assert!(!title.contains("pwned"), "{path}: a script ran ({title})");
        assert_eq!(browser.count("script").await, 0, "{path}: a script element");
        assert_eq!(browser.count("b, i").await, 0, "{path}: markup from a job");
        assert!(
            browser
                .body_text()
                .await
                .contains("<script>document.title='pwned'</script>"),
            "{path}: the markup is not shown as text"
        );
    }
    browser
        .goto(&format!("{base}/ui/jobs/{}", seeded.hostile))
        .await;
    assert_eq!(browser.text("#last-error").await, HOSTILE_ERROR);
    assert_eq!(browser.text("#job-tenant").await, HOSTILE_TITLE);
    let payload = browser.text("#payload").await;
    assert!(
        payload.contains("\"title\": \"<script>document.title='pwned'</script>\""),
        "{payload}"
    );
    assert!(
        payload.contains(r#"\"double\" & 'single' <i>quotes</i>"#),
        "{payload}"
    );

    browser.close().await;
    node.stop().await.unwrap();
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_read_only_token_changes_nothing_and_forms_need_their_csrf_token(pool: PgPool) {
    let (mut node, base) = start_node(&pool, Arc::new(AtomicBool::new(false)), None).await;
    let seeded = seed(&pool, false).await;
    let reader = token(&pool, "auditor", Scope::Read).await;
    let admin = token(&pool, "night-operator", Scope::Admin).await;
    let browser = Browser::start(Screen::Laptop).await;
    log_in(&browser, &base, &reader).await;

    // No form but logging out, on any page, for a reader.
    for path in [
        "/ui".to_owned(),
        format!("/ui/jobs/{}", seeded.webhooks[0]),
        format!("/ui/jobs/{}", seeded.delayed),
        "/ui/dead-letters".to_owned(),
        "/ui/queues".to_owned(),
        "/ui/schedules".to_owned(),
    ] {
        browser.goto(&format!("{base}{path}")).await;
        assert_eq!(
            browser.count("form[method='post']").await,
            1,
            "{path}: a reader sees only the logout form"
        );
        for action in ["a[href$='/cancel']", "a[href$='/replay']", "a.retry"] {
            assert_eq!(browser.count(action).await, 0, "{path}: {action}");
        }
    }
    // The confirmation pages refuse a reader too.
    browser
        .goto(&format!("{base}/ui/jobs/{}/replay", seeded.webhooks[0]))
        .await;
    assert!(browser.body_text().await.contains("403 FORBIDDEN"));

    // A reader's POST with a valid session and CSRF token is refused.
    let posted = |action: String| {
        format!(
            "const csrf = document.querySelector('form.who input[name=csrf]').value;
             const form = document.createElement('form');
             form.method = 'post'; form.action = '{action}';
             const field = document.createElement('input');
             field.type = 'hidden'; field.name = 'csrf'; field.value = csrf;
             form.appendChild(field); document.body.appendChild(form); form.submit();"
        )
    };
    for action in [
        format!("/ui/jobs/{}/replay", seeded.webhooks[0]),
        format!("/ui/jobs/{}/cancel", seeded.delayed),
        "/ui/queues/pause".to_owned(),
        "/ui/schedules/nightly-report/pause".to_owned(),
        "/ui/tenants/cap".to_owned(),
    ] {
        browser.goto(&format!("{base}/ui")).await;
        browser.submit_by_script(&posted(action.clone())).await;
        assert_eq!(browser.path().await, action);
        assert!(
            browser.body_text().await.contains("403 FORBIDDEN"),
            "{action}: {}",
            browser.body_text().await
        );
    }
    assert_eq!(job_state(&pool, seeded.webhooks[0]).await, JobState::Failed);
    assert_eq!(job_state(&pool, seeded.delayed).await, JobState::Queued);
    assert!(!queue_paused(&pool, "default").await);
    assert!(
        !jobwire_core::get_schedule(&pool, "nightly-report")
            .await
            .unwrap()
            .unwrap()
            .paused
    );

    // An admin's form posted without its CSRF token, or with a forged one,
    // is refused and changes nothing.
    browser.goto(&format!("{base}/ui")).await;
    browser.click("form.who button").await;
    log_in(&browser, &base, &admin).await;
    browser.goto(&format!("{base}/ui/queues")).await;
    browser
        .submit_by_script(
            "const form = document.querySelector(\"tr[data-queue='default'] form\");
             form.querySelector('input[name=csrf]').remove(); form.submit();",
        )
        .await;
    assert_eq!(browser.path().await, "/ui/queues/pause");
    assert!(browser.body_text().await.contains("403 CSRF_REJECTED"));
    assert!(!queue_paused(&pool, "default").await);
    browser.goto(&format!("{base}/ui/queues")).await;
    browser
        .submit_by_script(
            "const form = document.querySelector(\"tr[data-queue='default'] form\");
             form.querySelector('input[name=csrf]').value = 'ab'.repeat(32); form.submit();",
        )
        .await;
    assert_eq!(browser.path().await, "/ui/queues/pause");
    assert!(browser.body_text().await.contains("403 CSRF_REJECTED"));
    assert!(!queue_paused(&pool, "default").await);

    browser.close().await;
    node.stop().await.unwrap();
}

/// A worker and the HTTP server over `pool`, one node, working the capped
/// queue `imports`: each `import` job waits at `gate` for a permit, so the
/// jobs that started stay RUNNING until the test lets them finish.
async fn start_import_node(
    pool: &PgPool,
    gate: Arc<tokio::sync::Semaphore>,
) -> (RunningNode, String) {
    let mut registry = HandlerRegistry::new();
    registry.register("import", move |_ctx: JobContext| {
        let gate = gate.clone();
        async move {
            let _permit = gate.acquire().await.expect("the gate stays open");
            Ok(())
        }
    });
    let worker = Worker::new(pool.clone(), registry, test_worker_config("imports", 8));
    let http = HttpServer::bind("127.0.0.1:0".parse().unwrap(), pool.clone())
        .await
        .unwrap();
    let base = format!("http://{}", http.local_addr().unwrap());
    let node = Node::new(pool.clone())
        .with_worker(worker)
        .with_http(http)
        .start()
        .unwrap();
    (node, base)
}

/// The `data-tenant` of each row of queue `queue`'s tenants, in page order.
async fn tenant_rows(browser: &Browser, queue: &str) -> Vec<String> {
    let rows = browser
        .client
        .find_all(Locator::Css(&format!(
            "section[data-queue='{queue}'] tbody tr[data-tenant]"
        )))
        .await
        .unwrap();
    let mut tenants = Vec::new();
    for row in rows {
        tenants.push(row.attr("data-tenant").await.unwrap().unwrap());
    }
    tenants
}

/// The cap of its own tenant `tenant` of queue `imports` has.
async fn own_cap(pool: &PgPool, tenant: &str) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT max_running FROM job_tenants WHERE queue = 'imports' AND tenant = $1",
    )
    .bind(tenant)
    .fetch_optional(pool)
    .await
    .unwrap()
    .flatten()
}

/// Wait until exactly `jobs` of queue `imports` run (`what` says what
/// failed if they never do).
async fn until_running(pool: &PgPool, jobs: i64, what: &str) {
    wait_for_count(
        pool,
        "SELECT count(*) FROM jobs WHERE queue = $1 AND state = 'RUNNING'",
        "imports",
        jobs,
        WAIT,
    )
    .await
    .unwrap_or_else(|err| panic!("{what}: {err}"));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_operator_sees_which_tenants_hold_a_capped_queue(pool: PgPool) {
    use jobwire_core::{EnqueueRate, QueueLimits, Shedding, TenantLimits};

    // Queue `imports`: 2 running per tenant by default, at most 100
    // waiting, shedding from 50; tenant `acme` runs 1, keeps at most 2
    // waiting and enqueues at most 100 a minute.
    jobwire_core::set_tenant_cap(&pool, "imports", None, Some(2))
        .await
        .unwrap();
    let queue_limits = QueueLimits {
        max_queued: Some(100),
        shed: Some(Shedding {
            depth: 50,
            priority: 0,
        }),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "imports", &queue_limits)
        .await
        .unwrap();
    let acme = TenantLimits {
        max_running: Some(1),
        max_queued: Some(2),
        enqueue_rate: Some(EnqueueRate {
            jobs: 100,
            per_seconds: 60,
        }),
    };
    // Enqueued before the worker starts: 6 of `bulk-co`, 3 of `acme`, 1 of
    // a tenant whose name is markup.
    let mut jobs = Vec::new();
    for (tenant, n) in [("bulk-co", 6), ("acme", 3), (HOSTILE_TITLE, 1)] {
        for i in 0..n {
            let job = NewJob::new("import", json!({"row": i}))
                .with_queue("imports")
                .with_tenant(tenant);
            jobs.push(enqueue(&pool, job).await);
        }
    }
    // Set after its enqueues: 3 waiting are over its own limit of 2.
    jobwire_core::set_tenant_limits(&pool, "imports", Some("acme"), &acme)
        .await
        .unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (mut node, base) = start_import_node(&pool, gate.clone()).await;
    // The caps let 2 + 1 + 1 start, of the worker's 8 slots.
    until_running(&pool, 4, "4 jobs never started").await;

    let reader = token(&pool, "auditor", Scope::Read).await;
    let browser = Browser::start(Screen::Laptop).await;
    log_in(&browser, &base, &reader).await;
    browser.click_link("Tenants").await;
    assert_eq!(browser.path().await, "/ui/tenants");
    let section = "section[data-queue='imports']";
    let limits = browser.text(&format!("{section} .limits")).await;
    assert_eq!(
        limits,
        "Each tenant: at most 2 running. The queue: at most 100 waiting. \
         From 50 waiting, only jobs of priority 0 or more urgent (a lower number) are taken."
    );
    // The tenants their cap holds back first, the most jobs waiting first
    // among them.
    assert_eq!(
        tenant_rows(&browser, "imports").await,
        ["bulk-co", "acme", HOSTILE_TITLE]
    );
    let cell =
        |tenant: &str, column: &str| format!("{section} tr[data-tenant='{tenant}'] td.{column}");
    assert_eq!(
        browser.text(&cell("bulk-co", "running")).await,
        "2 of 2 held back"
    );
    assert_eq!(browser.text(&cell("bulk-co", "waiting")).await, "4");
    assert_eq!(browser.text(&cell("bulk-co", "rate")).await, "—");
    assert_eq!(
        browser.text(&cell("acme", "running")).await,
        "1 of 1 (own) held back"
    );
    assert_eq!(
        browser.text(&cell("acme", "waiting")).await,
        "2 of 2 (own) full"
    );
    assert_eq!(browser.text(&cell("acme", "rate")).await, "100/min (own)");
    // The tenant named in markup reads as text, and nothing of it runs.
    let title: String = browser.client.title().await.unwrap();
    assert!(!title.contains("pwned"), "a script ran ({title})");
    assert_eq!(
        browser.count("script, b, i").await,
        0,
        "markup from a tenant"
    );
    assert!(browser.body_text().await.contains(HOSTILE_TITLE));
    assert_eq!(
        browser.count("form[method='post']").await,
        1,
        "a reader sees only the logout form"
    );
    // A reader's whole, valid form, with its session's CSRF token, is
    // refused, and changes nothing.
    browser
        .submit_by_script(
            "const csrf = document.querySelector('form.who input[name=csrf]').value;
             const form = document.createElement('form');
             form.method = 'post'; form.action = '/ui/tenants/cap';
             for (const [name, value] of [['csrf', csrf], ['queue', 'imports'],
                                          ['tenant', 'acme'], ['max_running', '9']]) {
               const field = document.createElement('input');
               field.type = 'hidden'; field.name = name; field.value = value;
               form.appendChild(field);
             }
             document.body.appendChild(form); form.submit();",
        )
        .await;
    assert!(browser.body_text().await.contains("403 FORBIDDEN"));
    assert_eq!(own_cap(&pool, "acme").await, Some(1));
    browser.goto(&format!("{base}/ui/tenants")).await;

    // A tenant's name leads to its jobs on that queue.
    browser
        .click(&format!("{section} tr[data-tenant='bulk-co'] a"))
        .await;
    assert_eq!(browser.path().await, "/ui/jobs");
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(url.query(), Some("queue=imports&tenant=bulk-co"));
    assert_eq!(browser.count("#jobs tbody a.job-id").await, 6);

    // The queue's row on the Queues page leads to its own tenants page; a
    // queue without tenant limits there says so; a bad query is a readable
    // 400.
    browser.click_link("Queues").await;
    browser
        .click("#queues tr[data-queue='imports'] a.tenants")
        .await;
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(
        (url.path(), url.query()),
        ("/ui/tenants", Some("queue=imports"))
    );
    assert_eq!(tenant_rows(&browser, "imports").await.len(), 3);
    browser
        .goto(&format!("{base}/ui/tenants?queue=elsewhere"))
        .await;
    assert!(
        browser
            .body_text()
            .await
            .contains("Queue elsewhere has no tenant limits."),
    );
    browser
        .goto(&format!("{base}/ui/tenants?tenant=acme"))
        .await;
    assert!(browser.body_text().await.contains("400 INVALID_QUERY"));

    // An admin raises `bulk-co`'s cap from its row: two more of its jobs
    // start. Then removes it: the default holds again, and the 4 running
    // show over it.
    browser.goto(&format!("{base}/ui")).await;
    browser.click("form.who button").await;
    let admin = token(&pool, "night-operator", Scope::Admin).await;
    log_in(&browser, &base, &admin).await;
    browser.click_link("Tenants").await;
    let bulk_cap = format!("{section} tr[data-tenant='bulk-co'] form.cap");
    browser
        .fill(&format!("{bulk_cap} input[name='max_running']"), "4")
        .await;
    browser
        .click(&format!("{bulk_cap} button:not(.remove)"))
        .await;
    assert!(browser.text(".notice").await.starts_with("Cap set"));
    assert_eq!(own_cap(&pool, "bulk-co").await, Some(4));
    until_running(&pool, 6, "the raised cap started nothing").await;
    browser.goto(&format!("{base}/ui/tenants")).await;
    assert_eq!(
        browser.text(&cell("bulk-co", "running")).await,
        "4 of 4 (own) held back"
    );
    assert_eq!(browser.text(&cell("bulk-co", "waiting")).await, "2");
    look(&browser, "tenants").await;
    // Without its CSRF token the form is refused, and changes nothing.
    browser
        .submit_by_script(
            "const form = document.querySelector(\"tr[data-tenant='bulk-co'] form.cap\");
             form.querySelector('input[name=csrf]').remove();
             form.querySelector('input[name=max_running]').value = '9'; form.submit();",
        )
        .await;
    assert!(browser.body_text().await.contains("403 CSRF_REJECTED"));
    assert_eq!(own_cap(&pool, "bulk-co").await, Some(4));
    browser.goto(&format!("{base}/ui/tenants")).await;
    browser.click(&format!("{bulk_cap} button.remove")).await;
    assert!(
        browser
            .text(".notice")
            .await
            .starts_with("The tenant's own cap is removed")
    );
    assert_eq!(
        browser.text(&cell("bulk-co", "running")).await,
        "4 of 2 over cap"
    );
    let overrides: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job_tenants WHERE tenant = 'bulk-co'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(overrides, 0, "the override row is gone");
    // Removing `acme`'s cap keeps its other limits of its own; the
    // default of 2 lets one more of its jobs start.
    let acme_cap = format!("{section} tr[data-tenant='acme'] form.cap");
    browser.click(&format!("{acme_cap} button.remove")).await;
    assert_eq!(own_cap(&pool, "acme").await, None);
    let kept: (Option<i32>, Option<i32>, Option<i32>) = sqlx::query_as(
        "SELECT max_queued, rate_jobs, rate_seconds FROM job_tenants WHERE tenant = 'acme'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, (Some(2), Some(100), Some(60)));
    until_running(&pool, 7, "acme's default cap started nothing").await;
    browser.goto(&format!("{base}/ui/tenants")).await;
    assert_eq!(
        browser.text(&cell("acme", "running")).await,
        "2 of 2 held back"
    );
    assert_eq!(browser.text(&cell("acme", "rate")).await, "100/min (own)");

    let phone = Browser::start(Screen::Phone).await;
    log_in(&phone, &base, &admin).await;
    phone.goto(&format!("{base}/ui/tenants")).await;
    look(&phone, "tenants").await;
    phone.close().await;

    // Let every job finish: the page follows.
    gate.add_permits(jobs.len());
    for id in &jobs {
        wait_for_state(&pool, *id, JobState::Succeeded, WAIT)
            .await
            .unwrap();
    }
    // (The node runs no reconciler, whose sweep would forget `bulk-co`'s
    // slot rows once it is idle.)
    browser.goto(&format!("{base}/ui/tenants")).await;
    assert_eq!(browser.text(&cell("bulk-co", "running")).await, "0 of 2");
    assert_eq!(browser.text(&cell("bulk-co", "waiting")).await, "0");
    assert_eq!(browser.text(&cell("acme", "running")).await, "0 of 2");
    assert_eq!(browser.text(&cell("acme", "waiting")).await, "0 of 2 (own)");

    browser.close().await;
    node.stop().await.unwrap();
}

/// Wait until the relay has published `job_id`'s wake-up: the enqueue
/// wrote it to the outbox in the same transaction, and the relay deletes a
/// row once the broker has confirmed it.
async fn wait_until_published(pool: &PgPool, job_id: Uuid) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while wake_ups_for(pool, job_id).await.unwrap() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "wake-up of {job_id} never published"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn queue_paused(pool: &PgPool, queue: &str) -> bool {
    jobwire_core::queue_overview(pool)
        .await
        .unwrap()
        .into_iter()
        .any(|q| q.queue == queue && q.paused)
}
