//! jobwire-core: the job model, its state machine, the fenced SQL that moves a
//! job through it, transactional enqueue, retry backoff and the migrations.
//!
//! The PostgreSQL `jobs` table is the single source of truth. Every function
//! here is one statement (one round trip) against it unless its docs say
//! otherwise, and all timestamps come from the database clock (`now()`).
//!
//! Fencing: a claim raises the job's `lease_generation`; every later write that
//! leaves RUNNING (heartbeat, complete, fail, cancel acknowledgement) carries
//! `(job_id, lease_owner, lease_generation)` in its WHERE clause. When that
//! changes no row the writer has lost its lease and gets [`Error::Fenced`],
//! never a silent success.
#![warn(missing_docs)]

pub mod backoff;
pub mod effects;
mod error;
pub mod json_numbers;
mod model;
pub mod schedule;
mod schema;
pub mod store;
mod time_text;
mod trace_context;

pub use backoff::Backoff;
pub use error::{Error, FullReason, database_message};
pub use model::{
    ClaimMiss, ClaimedJob, DeadLetterGroup, Dispatch, EnqueuedJob, FinishOutcome, FinishResult,
    HeartbeatResult, JobFilter, JobState, JobStatus, Lease, LeaseGeneration, NewJob,
    ParseJobStateError, QueueOverview, RequestCancelOutcome,
};
pub use schema::{MIGRATOR, SchemaState, migrate, schema_state};
pub use store::{
    API_TOKEN_CHANNEL, ApiToken, AuditEntry, BulkReplay, ClaimByIds, CreatedToken, EnqueueRate,
    Enqueuer, FinishedInMinute, FireReport, JobPage, LIST_SCAN_ROWS, MAX_DEDUP_KEY_LEN,
    MAX_ERROR_CODE_BYTES, MAX_ERROR_MESSAGE_BYTES, MAX_LIMIT, MAX_PAYLOAD_BYTES, MAX_RATE_SECONDS,
    MAX_RETRY_DELAY, MissedRuns, OpenedUiSession, OutboxDeadGroup, OutboxReplayFilter,
    PAYLOAD_CEILING_BYTES, QueueLimits, ReplayFilter, Schedule, ScheduleSpec, Scope, Shedding,
    SideTable, StoredApiToken, TenantCap, TenantCaps, TenantLimits, WAKE_CHANNEL,
    acknowledge_cancel, archive_finished, authenticate_api_token, claim_batch, claim_by_ids,
    claim_overdue, complete, create_api_token, create_tenant_api_token, create_ui_session,
    database_now, dead_letter_groups, delete_schedule, end_ui_session, enqueue, enqueue_many, fail,
    find_live_api_token, find_ui_session, finish_many, finished_per_minute, fire_due_schedules,
    forget_idle_tenant_slots, get_schedule, hand_out_free_tenant_slots, heartbeat, heartbeat_many,
    job_audit_trail, job_status, lease_expiries_since, list_api_tokens, list_jobs, list_schedules,
    max_payload_bytes, outbox_dead_groups, outbox_lag, parse_api_token, put_schedule,
    queue_dispatch, queue_is_known, queue_limits, queue_overview, queues_sharing_topics,
    queues_with_tenant_limits, reconcile_wake_ups, release_handed_slots, replay_dead,
    replay_dead_in_batches, replay_dead_job, replay_dead_job_and_read, replay_outbox_dead,
    request_cancel, resume_queue, revoke_api_token, set_max_payload_bytes, set_queue_dispatch,
    set_queue_limits, set_queue_paused, set_schedule_paused, set_tenant_cap, set_tenant_limits,
    sweep_expired_leases, tenant_caps, trim_side_table, validate_queue, validate_schedule_name,
    validate_tenant,
};
pub use time_text::parse_time;
pub use trace_context::{MAX_TRACESTATE_BYTES, TraceContext};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
