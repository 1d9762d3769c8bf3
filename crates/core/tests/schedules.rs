//! Schedules against a real PostgreSQL: validation, the missed-run policies,
//! jitter, and schedulers racing on the same rows.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};
use jobwire_core::{Error, MissedRuns, NewJob, ScheduleSpec};
use jobwire_test_support::until_a_session_waits_for_a_lock;
use serde_json::json;
use sqlx::PgPool;

fn spec(name: &str, cron: &str) -> ScheduleSpec {
    ScheduleSpec::new(
        name,
        cron,
        "UTC",
        NewJob::new("send_daily_digest", json!({"list": "all"})),
    )
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn bad_schedules_are_refused_and_nothing_is_stored(pool: PgPool) {
    let cases: Vec<(ScheduleSpec, &str)> = vec![
        (spec("bad-cron", "61 * * * *"), "cron"),
        (spec("words", "every day at eight"), "cron"),
        (spec("feb-30", "0 0 30 2 *"), "cron"),
        // Every second from 00:00 to 00:59 on March's second Sunday, by
        // elapsed time (the hour is a step): it fired in 2000, but since
        // 2013 Havana's clocks jump from 00:00 to 01:00 that night, so
        // its next 100,000 matches all fall in the gap.
        (
            ScheduleSpec {
                timezone: "America/Havana".into(),
                ..spec("in-a-gap", "* * 0-1/2 * 3 SUN#2")
            },
            "cron",
        ),
        (
            ScheduleSpec {
                timezone: "Mars/Olympus".into(),
                ..spec("zone", "0 8 * * *")
            },
            "timezone",
        ),
        (
            ScheduleSpec {
                jitter_seconds: 86_401,
                ..spec("jitter", "0 8 * * *")
            },
            "jitter_seconds",
        ),
        (
            ScheduleSpec {
                max_catch_up: 0,
                ..spec("catch-up", "0 8 * * *")
            },
            "max_catch_up",
        ),
        (spec("", "0 8 * * *"), "name"),
        (spec("has space", "0 8 * * *"), "name"),
        (
            ScheduleSpec {
                job: NewJob::new("", json!({})),
                ..spec("no-type", "0 8 * * *")
            },
            "job_type",
        ),
        (
            ScheduleSpec {
                job: NewJob::new("x", json!({})).with_dedup_key("k"),
                ..spec("key", "0 8 * * *")
            },
            "job",
        ),
    ];
    for (case, field) in cases {
        let err = jobwire_core::put_schedule(&pool, &case).await.unwrap_err();
        let named = match &err {
            Error::InvalidArgument { argument, .. } => *argument,
            Error::InvalidJob { field, .. } => *field,
            other => panic!("{}: {other}", case.name),
        };
        assert_eq!(named, field, "{}: {err}", case.name);
    }
    jobwire_core::set_max_payload_bytes(&pool, 16)
        .await
        .unwrap();
    let big = ScheduleSpec {
        job: NewJob::new("x", json!({"blob": "0123456789abcdef"})),
        ..spec("big", "0 8 * * *")
    };
    assert!(matches!(
        jobwire_core::put_schedule(&pool, &big).await,
        Err(Error::PayloadTooLarge { .. })
    ));
    assert_eq!(count(&pool, "SELECT count(*) FROM job_schedules").await, 0);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_schedule_is_created_replaced_paused_and_removed(pool: PgPool) {
    let daily = ScheduleSpec {
        timezone: "Asia/Kolkata".into(),
        jitter_seconds: 600,
        ..spec("digest", "0 8 * * *")
    };
    assert!(
        jobwire_core::put_schedule(&pool, &daily).await.unwrap(),
        "created"
    );
    assert!(
        !jobwire_core::put_schedule(&pool, &daily).await.unwrap(),
        "replaced"
    );
    let stored = jobwire_core::get_schedule(&pool, "digest")
        .await
        .unwrap()
        .unwrap();
    let next = stored.next_run_at.unwrap();
    // 08:00 in Kolkata is 02:30 UTC.
    assert_eq!((next.hour(), next.minute()), (2, 30));
    assert_eq!(stored.next_occurrences(next, 3).unwrap().len(), 3);

    assert!(
        jobwire_core::set_schedule_paused(&pool, "digest", true)
            .await
            .unwrap()
    );
    assert!(
        jobwire_core::get_schedule(&pool, "digest")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    assert!(
        jobwire_core::set_schedule_paused(&pool, "digest", false)
            .await
            .unwrap()
    );
    assert!(
        !jobwire_core::set_schedule_paused(&pool, "nope", true)
            .await
            .unwrap()
    );
    assert_eq!(jobwire_core::list_schedules(&pool).await.unwrap().len(), 1);
    assert!(
        jobwire_core::delete_schedule(&pool, "digest")
            .await
            .unwrap()
    );
    assert!(
        !jobwire_core::delete_schedule(&pool, "digest")
            .await
            .unwrap()
    );
}

/// A resume computes the next occurrence from the cron the row holds once
/// it has the row: a put committing meanwhile (here its update, held open)
/// had its new cron stored beside a time of the old one, and a yearly
/// schedule fired the next minute.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_resume_follows_the_cron_a_concurrent_put_stored(pool: PgPool) {
    jobwire_core::put_schedule(&pool, &spec("report", "* * * * *"))
        .await
        .unwrap();
    jobwire_core::set_schedule_paused(&pool, "report", true)
        .await
        .unwrap();
    let new_year = DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
        .unwrap()
        .to_utc();
    let mut put = pool.begin().await.unwrap();
    sqlx::query("UPDATE job_schedules SET cron = '0 0 1 1 *', next_run_at = $2 WHERE name = $1")
        .bind("report")
        .bind(new_year)
        .execute(&mut *put)
        .await
        .unwrap();
    let resume = tokio::spawn({
        let pool = pool.clone();
        async move { jobwire_core::set_schedule_paused(&pool, "report", false).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    put.commit().await.unwrap();
    assert!(resume.await.unwrap().unwrap());
    let next = jobwire_core::get_schedule(&pool, "report")
        .await
        .unwrap()
        .unwrap()
        .next_run_at
        .unwrap();
    assert_eq!(
        (next.month(), next.day(), next.hour(), next.minute()),
        (1, 1, 0, 0),
        "a yearly schedule resumed at {next}"
    );
}

/// A put of a new cron waits for a scheduler firing the schedule, and
/// restarts after what it fired. With the clock read before the wait, an
/// occurrence that came due meanwhile was fired under the old definition
/// and stored as due again under the new one: with a new job type, a
/// second job for the same instant.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_put_restarts_after_what_a_scheduler_fired_meanwhile(pool: PgPool) {
    let every_second = |cron: &str, job_type: &str| ScheduleSpec {
        job: NewJob::new(job_type, json!({})),
        ..spec("tick", cron)
    };
    jobwire_core::put_schedule(&pool, &every_second("* * * * * *", "tick_v1"))
        .await
        .unwrap();
    // A scheduler holds the schedule's row while it fires.
    let mut scheduler = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM job_schedules WHERE name = 'tick' FOR UPDATE")
        .execute(&mut *scheduler)
        .await
        .unwrap();
    let put = tokio::spawn({
        let pool = pool.clone();
        let spec = every_second("*/1 * * * * *", "tick_v2");
        async move { jobwire_core::put_schedule(&pool, &spec).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    // An occurrence comes due while it waits, and the scheduler fires it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fired: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE job_schedules
         SET last_fired_for = date_trunc('second', clock_timestamp()),
             next_run_at = date_trunc('second', clock_timestamp()) + interval '1 second'
         WHERE name = 'tick' RETURNING last_fired_for",
    )
    .fetch_one(&mut *scheduler)
    .await
    .unwrap();
    scheduler.commit().await.unwrap();
    assert!(!put.await.unwrap().unwrap(), "replaced");
    let stored = jobwire_core::get_schedule(&pool, "tick")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.cron, "*/1 * * * * *");
    let next = stored.next_run_at.unwrap();
    assert!(next > fired, "{next} is due again though {fired} was fired");
}

/// An hourly schedule whose scheduler was down for three of its occurrences:
/// the cron's minute is half an hour away from now, so none of the three is
/// on time whatever minute the test runs at.
async fn down_for_three_hours(pool: &PgPool, name: &str, missed: MissedRuns) -> Vec<DateTime<Utc>> {
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(pool)
        .await
        .unwrap();
    let minute = (now.minute() + 30) % 60;
    let hourly = ScheduleSpec {
        missed,
        jitter_seconds: 0,
        ..spec(name, &format!("{minute} * * * *"))
    };
    jobwire_core::put_schedule(pool, &hourly).await.unwrap();
    let next = jobwire_core::get_schedule(pool, name)
        .await
        .unwrap()
        .unwrap()
        .next_run_at
        .unwrap();
    // The last occurrence before now, and the two before it.
    let latest = next - chrono::TimeDelta::hours(1);
    sqlx::query("UPDATE job_schedules SET next_run_at = $2 WHERE name = $1")
        .bind(name)
        .bind(latest - chrono::TimeDelta::hours(2))
        .execute(pool)
        .await
        .unwrap();
    jobwire_core::fire_due_schedules(pool, 100).await.unwrap();
    let fired: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT scheduled_for FROM jobs WHERE schedule_name = $1 ORDER BY scheduled_for",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    // Whatever the policy, the schedule now waits for its next occurrence.
    let after = jobwire_core::get_schedule(pool, name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.next_run_at, Some(next), "{name}");
    assert!(fired.iter().all(|at| *at <= latest));
    fired
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn missed_runs_follow_the_schedules_policy(pool: PgPool) {
    assert_eq!(
        down_for_three_hours(&pool, "skip", MissedRuns::Skip)
            .await
            .len(),
        0
    );
    let latest = down_for_three_hours(&pool, "latest", MissedRuns::Latest).await;
    assert_eq!(latest.len(), 1);
    let payload: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM jobs WHERE schedule_name = 'latest'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        payload,
        json!({"list": "all", "_schedule": {"missedOccurrences": 2}})
    );
    let all = down_for_three_hours(&pool, "all", MissedRuns::All).await;
    assert_eq!(all.len(), 3);
    assert_eq!(all[2] - all[0], chrono::TimeDelta::hours(2));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn each_job_records_its_occurrence_and_jitter_stays_in_its_window(pool: PgPool) {
    let every_second = ScheduleSpec {
        jitter_seconds: 30,
        ..spec("tick", "* * * * * *")
    };
    jobwire_core::put_schedule(&pool, &every_second)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let report = jobwire_core::fire_due_schedules(&pool, 100).await.unwrap();
    assert!(report.enqueued >= 1, "{report:?}");
    let rows: Vec<(String, DateTime<Utc>, DateTime<Utc>, String)> = sqlx::query_as(
        "SELECT schedule_name, scheduled_for, run_after, dedup_key FROM jobs ORDER BY scheduled_for",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for (name, nominal, run_after, key) in rows {
        assert_eq!(name, "tick");
        assert_eq!(
            key,
            format!("schedule:tick@{}", nominal.format("%Y-%m-%dT%H:%M:%SZ"))
        );
        let jitter = run_after - nominal;
        assert!(
            jitter >= chrono::TimeDelta::zero() && jitter < chrono::TimeDelta::seconds(30),
            "{jitter}"
        );
        let status = jobwire_core::list_jobs(&pool, &Default::default(), 1)
            .await
            .unwrap();
        assert_eq!(status.jobs[0].schedule_name.as_deref(), Some("tick"));
    }
}

/// A schedule's job may work for a tenant: the tenant is kept with the
/// schedule, every occurrence's job carries it, and a replacement without
/// one removes it. A blank tenant is refused, as for any job.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_schedules_jobs_work_for_its_tenant(pool: PgPool) {
    let for_acme = |tenant: &str| ScheduleSpec {
        job: NewJob::new("nightly_report", json!({})).with_tenant(tenant),
        ..spec("acme-nightly", "0 2 * * *")
    };
    match jobwire_core::put_schedule(&pool, &for_acme(" ")).await {
        Err(Error::InvalidJob { field, .. }) => assert_eq!(field, "tenant"),
        other => panic!("{other:?}"),
    }
    jobwire_core::put_schedule(&pool, &for_acme("acme"))
        .await
        .unwrap();
    let stored = jobwire_core::get_schedule(&pool, "acme-nightly")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.tenant.as_deref(), Some("acme"));

    sqlx::query("UPDATE job_schedules SET next_run_at = now() - interval '1 minute'")
        .execute(&pool)
        .await
        .unwrap();
    let report = jobwire_core::fire_due_schedules(&pool, 10).await.unwrap();
    assert_eq!(report.enqueued, 1, "{report:?}");
    let tenants: Vec<Option<String>> = sqlx::query_scalar("SELECT tenant FROM jobs")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(tenants, vec![Some("acme".to_owned())]);

    jobwire_core::put_schedule(&pool, &spec("acme-nightly", "0 2 * * *"))
        .await
        .unwrap();
    let replaced = jobwire_core::get_schedule(&pool, "acme-nightly")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replaced.tenant, None);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn four_schedulers_racing_fire_each_occurrence_exactly_once(pool: PgPool) {
    const SCHEDULES: usize = 200;
    const RUN: Duration = Duration::from_secs(60);
    for n in 0..SCHEDULES {
        let every_second = ScheduleSpec {
            missed: MissedRuns::All,
            ..spec(&format!("s{n:03}"), "* * * * * *")
        };
        jobwire_core::put_schedule(&pool, &every_second)
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + RUN;
    let schedulers: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut total = jobwire_core::FireReport::default();
                while tokio::time::Instant::now() < deadline {
                    let report = jobwire_core::fire_due_schedules(&pool, 50).await.unwrap();
                    total.enqueued += report.enqueued;
                    total.already_fired += report.already_fired;
                    if report.schedules == 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                total
            })
        })
        .collect();
    let mut enqueued = 0;
    for scheduler in schedulers {
        let total = scheduler.await.unwrap();
        // No scheduler ever tried an occurrence another had fired: the row
        // lock and the advance in the same transaction decide, not the
        // dedup key (which would have refused it anyway).
        assert_eq!(total.already_fired, 0);
        enqueued += total.enqueued;
    }
    let jobs = count(&pool, "SELECT count(*) FROM jobs").await;
    assert_eq!(jobs as usize, enqueued);
    assert_eq!(
        count(&pool, "SELECT count(DISTINCT dedup_key) FROM jobs").await,
        jobs
    );
    // None missing: each schedule has every second from its first
    // occurrence to its last.
    let spans: Vec<(String, i64, f64)> = sqlx::query_as(
        "SELECT schedule_name, count(*), extract(epoch FROM max(scheduled_for) - min(scheduled_for))::float8
         FROM jobs GROUP BY schedule_name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(spans.len(), SCHEDULES);
    let by_name: HashMap<String, (i64, f64)> =
        spans.into_iter().map(|(n, c, s)| (n, (c, s))).collect();
    for (name, (fired, seconds)) in &by_name {
        assert_eq!(
            *fired,
            *seconds as i64 + 1,
            "{name}: {fired} jobs over {seconds} s"
        );
        assert!(*fired >= 50, "{name}: only {fired} in {RUN:?}");
    }
}

/// A payload with no room for the `_schedule` note goes without it. The
/// note once took such a payload past the payload ceiling: the statement
/// firing every due schedule failed, and failed again on every try, so no
/// schedule fired with it ever fired again.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_payload_with_no_room_for_the_note_does_not_stop_the_others(pool: PgPool) {
    jobwire_core::set_max_payload_bytes(&pool, jobwire_core::PAYLOAD_CEILING_BYTES)
        .await
        .unwrap();
    // `{"x": "…"}` as PostgreSQL writes a jsonb: the text and 9 bytes.
    let big = json!({ "x": "a".repeat(jobwire_core::PAYLOAD_CEILING_BYTES - 20) });
    for (name, payload) in [("big", big), ("small", json!({"list": "all"}))] {
        let every_minute = ScheduleSpec {
            missed: MissedRuns::Latest,
            jitter_seconds: 0,
            ..ScheduleSpec::new(name, "* * * * *", "UTC", NewJob::new("digest", payload))
        };
        jobwire_core::put_schedule(&pool, &every_minute)
            .await
            .unwrap();
    }
    // Down for ten minutes: each fires once, for nine runs it missed.
    sqlx::query(
        "UPDATE job_schedules SET next_run_at = date_trunc('minute', now()) - interval '9 minutes'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let report = jobwire_core::fire_due_schedules(&pool, 100).await.unwrap();
    assert_eq!((report.schedules, report.enqueued), (2, 2), "{report:?}");
    let notes: HashMap<String, Option<serde_json::Value>> =
        sqlx::query_as("SELECT schedule_name, payload -> '_schedule' FROM jobs")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    assert_eq!(notes["big"], None, "no room for the note");
    // Nine, or ten if a minute turned since the update.
    let missed = notes["small"].as_ref().expect("the note")["missedOccurrences"]
        .as_u64()
        .unwrap();
    assert!((9..=10).contains(&missed), "{:?}", notes["small"]);
}

/// A resume finds the next occurrence of the cron the row holds: one with
/// none after now (stored by hand, or before puts refused such a cron) is
/// refused, naming `cron`, and the schedule stays paused; a schedule that
/// runs is left as it is.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_resume_without_an_occurrence_after_now_is_refused(pool: PgPool) {
    jobwire_core::put_schedule(&pool, &spec("gap", "0 8 * * *"))
        .await
        .unwrap();
    assert!(
        jobwire_core::set_schedule_paused(&pool, "gap", true)
            .await
            .unwrap()
    );
    sqlx::query(
        "UPDATE job_schedules SET cron = '* * 0-1/2 * 3 SUN#2', timezone = 'America/Havana'
         WHERE name = 'gap'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let err = jobwire_core::set_schedule_paused(&pool, "gap", false)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidArgument {
                argument: "cron",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no occurrence after"), "{err}");
    let paused: bool = sqlx::query_scalar("SELECT paused FROM job_schedules WHERE name = 'gap'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(paused);
    // Resuming one that runs changes nothing, whatever its cron.
    sqlx::query("UPDATE job_schedules SET paused = false WHERE name = 'gap'")
        .execute(&pool)
        .await
        .unwrap();
    assert!(
        jobwire_core::set_schedule_paused(&pool, "gap", false)
            .await
            .unwrap()
    );
}
