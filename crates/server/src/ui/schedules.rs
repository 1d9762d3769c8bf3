//! `/ui/schedules`: each recurring schedule with its cron, zone and next
//! three fire times, and pausing or resuming it.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use jobwire_core::{Schedule, Scope};
use maud::{Markup, html};

use super::error::UiError;
use super::extract::{UiForm, UiPath};
use super::format::{for_tenant, maybe_time, path_segment, time};
use super::layout::{Section, page};
use super::session::{ActionForm, Viewer};
use crate::api::ApiState;

/// Fire times shown per schedule.
const UPCOMING: usize = 3;

fn action_href(name: &str, action: &str) -> String {
    format!("/ui/schedules/{}/{action}", path_segment(name))
}

/// A fire time in the schedule's own zone, with UTC beside it.
fn local_time(schedule: &Schedule, at: DateTime<Utc>) -> Markup {
    let zone: Option<chrono_tz::Tz> = schedule.timezone.parse().ok();
    html! {
        @match zone {
            Some(zone) if zone != chrono_tz::UTC => {
                time datetime=(at.to_rfc3339()) { (at.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z")) }
                br; span.muted { (at.format("%H:%M:%S UTC")) }
            }
            _ => { (time(at)) }
        }
    }
}

/// `GET /ui/schedules`.
pub(crate) async fn list(viewer: Viewer, State(state): State<ApiState>) -> Result<Markup, UiError> {
    let schedules = jobwire_core::list_schedules(&state.pool).await?;
    let admin = viewer.can(Scope::Admin);
    let body = html! {
        div.table-wrap {
            table.cards-on-phone #schedules {
                thead { tr {
                    th { "Name" } th { "Cron" } th { "Zone" } th { "Job" }
                    th { "Next fire times" } th { "Last fired" } th { "State" }
                    @if admin { th {} }
                } }
                tbody {
                    @for schedule in &schedules {
                        tr data-schedule=(schedule.name) {
                            td data-label="Name" { (schedule.name) }
                            td data-label="Cron" { code { (schedule.cron) } }
                            td data-label="Zone" { (schedule.timezone) }
                            td data-label="Job" {
                                (schedule.job_type) " on " (schedule.queue)
                                (for_tenant(schedule.tenant.as_deref()))
                            }
                            td.nowrap data-label="Next fire times" {
                                @let times = schedule.upcoming(UPCOMING).unwrap_or_default();
                                @if let Some(problem) = schedule.problem() {
                                    span.problem { (problem) }
                                } @else if !times.is_empty() {
                                    @for (i, at) in times.iter().enumerate() {
                                        @if i > 0 { br; }
                                        (local_time(schedule, *at))
                                    }
                                } @else if schedule.paused {
                                    span.muted { "paused" }
                                } @else {
                                    span.muted { "never again" }
                                }
                            }
                            td.nowrap data-label="Last fired" { (maybe_time(schedule.last_fired_at)) }
                            td.schedule-state data-label="State" {
                                @if schedule.paused { span.badge.paused { "paused" } } @else { span.badge.done { "active" } }
                            }
                            @if admin {
                                td data-label="" {
                                    @let action = if schedule.paused { "resume" } else { "pause" };
                                    form.inline method="post" action=(action_href(&schedule.name, action)) {
                                        (viewer.csrf_field())
                                        button.small.secondary[!schedule.paused] type="submit" {
                                            @if schedule.paused { "Resume" } @else { "Pause" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if schedules.is_empty() {
                        tr { td.empty colspan="8" {
                            "No schedules. Create one with " code { "jobwire schedule put" } " or " code { "PUT /schedules/{name}" } "."
                        } }
                    }
                }
            }
        }
    };
    Ok(page("Schedules", Section::Schedules, Some(&viewer), body))
}

async fn set_paused(
    viewer: Viewer,
    state: ApiState,
    name: String,
    csrf: &str,
    paused: bool,
) -> Result<Response, UiError> {
    viewer.authorize(csrf, Scope::Admin)?;
    if !jobwire_core::set_schedule_paused(&state.pool, &name, paused).await? {
        return Err(UiError::not_found(
            "SCHEDULE_NOT_FOUND",
            format!("No schedule {name:?}."),
        ));
    }
    tracing::info!(actor = %viewer.token.name, schedule = %name, paused, "schedule pause changed from the dashboard");
    Ok(Redirect::to("/ui/schedules").into_response())
}

/// `POST /ui/schedules/{name}/pause`.
pub(crate) async fn pause(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiPath(name): UiPath,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    set_paused(viewer, state, name, &form.csrf, true).await
}

/// `POST /ui/schedules/{name}/resume`.
pub(crate) async fn resume(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiPath(name): UiPath,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    set_paused(viewer, state, name, &form.csrf, false).await
}
