//! The fenced job store: every SQL statement that moves a job, one per file in
//! `crates/core/sql/`, each a single round trip.
//!
//! Functions take any sqlx executor (`&PgPool`, `&mut PgConnection`,
//! `&mut Transaction`) so they run inside the caller's transaction; the few
//! that may need a second statement (dedup races, error diagnosis) take an
//! [`Acquire`](sqlx::Acquire) instead.
//!
//! **Planned at each call.** A statement a connection prepared is planned
//! anew for its first five runs, then PostgreSQL may keep one generic plan
//! for good, made with the statistics and the table sizes of that moment.
//! A worker or relay that starts on a quiet database makes those runs on
//! empty tables, and the plan it keeps expects one row: after a burst of
//! 100,000 jobs, the first claim read every row twice and compared 50
//! million pairs (7.5 s by hand, docs/benchmarks.md, "Statements planned
//! on an empty table"). So the statements that run while a worker or relay
//! idles and read `jobs` or `job_outbox` by a plan (the claims, the
//! heartbeats, the sweep, the reconciler, the relay's passes) are sent
//! unprepared (`.persistent(false)`) and planned at each call, for a round
//! trip more each; the functions behind them are `force_custom_plan`
//! (migrations 20261207000002 and 3). The completion (`finish_many`), a
//! large statement whose parse cost a sixth of a drain when sent
//! unprepared, runs in a function instead (migration 20261207000005):
//! parsed once per session, planned at each call. Kept prepared, its first
//! runs on an empty table made a plan that read the whole table twice per
//! completion. The enqueue keeps its plans: it inserts, and looks up the
//! holder of a dedup key only for a duplicate (whether that lookup can keep
//! an empty table's plan was not measured).

use std::time::Duration;

mod activity;
mod admin;
mod audit;
mod cancel;
mod enqueue;
mod health;
mod lease;
mod limits;
mod maintenance;
mod outbox;
mod outcome_text;
mod payload_text;
mod queues;
mod schedules;
mod settings;
mod tenants;
mod tokens;
mod ui_sessions;
mod views;

pub use activity::{FinishedInMinute, finished_per_minute, lease_expiries_since};
pub use admin::{
    BulkReplay, ReplayFilter, dead_letter_groups, job_status, replay_dead, replay_dead_in_batches,
    replay_dead_job, replay_dead_job_and_read,
};
pub use audit::{AuditEntry, job_audit_trail};
pub use cancel::request_cancel;
pub use enqueue::{Enqueuer, MAX_DEDUP_KEY_LEN, enqueue, enqueue_many};
pub use health::{
    FailedGroup, OutboxHealth, ScheduleDelay, TableHealth, failed_groups_top,
    keep_collector_session_alive, outbox_health, schedule_delays, table_health,
    try_lead_metrics_collector,
};
pub use lease::{
    ClaimByIds, acknowledge_cancel, claim_batch, claim_by_ids, claim_overdue, complete, fail,
    finish_many, heartbeat, heartbeat_many,
};
pub use limits::{
    EnqueueRate, MAX_LIMIT, MAX_RATE_SECONDS, QueueLimits, Shedding, TenantLimits, queue_limits,
    set_queue_limits, set_tenant_limits,
};
pub use maintenance::{
    SideTable, SweptLease, archive_finished, outbox_lag, reconcile_wake_ups, sweep_expired_leases,
    trim_side_table,
};
pub use outbox::{OutboxDeadGroup, OutboxReplayFilter, outbox_dead_groups, replay_outbox_dead};
pub use outcome_text::{MAX_ERROR_CODE_BYTES, MAX_ERROR_MESSAGE_BYTES, MAX_RETRY_DELAY};
pub(crate) use payload_text::PayloadText;
pub use queues::{
    queue_dispatch, queue_is_known, queues_sharing_topics, resume_queue, set_queue_dispatch,
    set_queue_paused, validate_queue,
};
pub use schedules::{
    FireReport, MAX_CATCH_UP, MAX_JITTER_SECONDS, MissedRuns, ON_TIME, Schedule, ScheduleSpec,
    delete_schedule, fire_due_schedules, get_schedule, list_schedules, put_schedule,
    set_schedule_paused, validate_schedule_name,
};
pub use settings::{PAYLOAD_CEILING_BYTES, max_payload_bytes, set_max_payload_bytes};
pub use tenants::{
    TenantCap, TenantCaps, forget_idle_tenant_slots, hand_out_free_tenant_slots,
    queues_with_tenant_limits, release_handed_slots, set_tenant_cap, tenant_caps, validate_tenant,
};
pub use tokens::{
    API_TOKEN_CHANNEL, ApiToken, CreatedToken, Scope, StoredApiToken, authenticate_api_token,
    create_api_token, create_tenant_api_token, find_live_api_token, list_api_tokens,
    parse_api_token, revoke_api_token,
};
pub use ui_sessions::{OpenedUiSession, create_ui_session, end_ui_session, find_ui_session};
pub use views::{JobPage, LIST_SCAN_ROWS, id_prefix_range, list_jobs, queue_overview};

/// The LISTEN/NOTIFY channel PostgreSQL-path workers listen on. The payload of
/// each notification is the queue that has new claimable work.
pub const WAKE_CHANNEL: &str = "jobwire_jobs";

/// The payload limit a new database starts with (`job_settings`): payloads
/// carry ids, not objects. Change it with [`set_max_payload_bytes`].
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// The database clock: every timestamp jobwire decides by comes from it.
pub async fn database_now<'c, E: sqlx::PgExecutor<'c>>(
    executor: E,
) -> crate::Result<chrono::DateTime<chrono::Utc>> {
    Ok(sqlx::query_scalar(include_str!("../../sql/db_now.sql"))
        .fetch_one(executor)
        .await?)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
