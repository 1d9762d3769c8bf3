//! `/ui/jobs`: find a job (by state, queue, type, error code, id prefix;
//! newest first, keyset pages on the primary key), see everything about it,
//! and cancel or replay it after a confirmation.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use jobwire_core::{JobFilter, JobState, JobStatus, RequestCancelOutcome, Scope};
use maud::{Markup, html};
use serde::Deserialize;
use uuid::Uuid;

use super::error::UiError;
use super::extract::{UiForm, UiJobId, UiQuery, given};
use super::format::{count, for_tenant, href, maybe_time, state_badge, time, truncate};
use super::layout::{Section, notice, page};
use super::session::{ActionForm, Viewer};
use crate::api::ApiState;

/// Jobs per page.
const PAGE: i64 = 50;
/// Audit entries shown on a job's page.
const AUDIT_SHOWN: i64 = 200;

/// `/ui/jobs?…` with these filters (values escaped for a URL).
pub(crate) fn list_href(filters: &[(&str, &str)]) -> String {
    href("/ui/jobs", filters)
}

/// The filters of the list, as the form sends them (blank fields absent).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    state: Option<String>,
    queue: Option<String>,
    #[serde(rename = "type")]
    job_type: Option<String>,
    #[serde(rename = "errorCode")]
    error_code: Option<String>,
    tenant: Option<String>,
    /// Hex digits of a job id (dashes allowed), or a whole id.
    id: Option<String>,
    /// Continue after this job (the last one of the page before).
    after: Option<String>,
}

impl ListQuery {
    /// The filters (without the page position), for links that keep them.
    fn filters(&self) -> Vec<(&'static str, String)> {
        [
            ("state", &self.state),
            ("queue", &self.queue),
            ("type", &self.job_type),
            ("errorCode", &self.error_code),
            ("tenant", &self.tenant),
            ("id", &self.id),
        ]
        .into_iter()
        .filter_map(|(name, value)| given(value).map(|value| (name, value)))
        .collect()
    }
}

/// `GET /ui/jobs`.
pub(crate) async fn list(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiQuery(query): UiQuery<ListQuery>,
) -> Result<Markup, UiError> {
    let job_state = given(&query.state)
        .map(|text| text.parse::<JobState>())
        .transpose()
        .map_err(|err| UiError::bad_request("INVALID_QUERY", format!("state: {err}")))?;
    let before = given(&query.after)
        .map(|text| text.parse::<Uuid>())
        .transpose()
        .map_err(|_| UiError::bad_request("INVALID_QUERY", "after: not a job id"))?;
    let id_prefix = given(&query.id);
    if let Some(prefix) = &id_prefix
        && jobwire_core::store::id_prefix_range(prefix).is_none()
    {
        return Err(UiError::bad_request(
            "INVALID_QUERY",
            "id: hex digits of a job id (dashes allowed), at most 32",
        ));
    }
    // An empty field is a blank form field (no filter); one of white space
    // only names nothing, as the API says.
    let (queue, job_type, tenant) = (
        given(&query.queue),
        given(&query.job_type),
        given(&query.tenant),
    );
    if let Some(field) = crate::api::jobs::blank_name_filter(&queue, &job_type, &tenant) {
        return Err(UiError::bad_request(
            "INVALID_QUERY",
            format!("{field}: must not be blank"),
        ));
    }
    let filter = JobFilter {
        state: job_state,
        queue,
        job_type,
        before,
        id_prefix,
        error_code: given(&query.error_code),
        tenant,
    };
    let listed = jobwire_core::list_jobs(&state.pool, &filter, PAGE).await?;
    let jobs = &listed.jobs;
    let filters = query.filters();
    let value_of = |name: &str| {
        filters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let older = listed.next_before.map(|next| {
        let mut with_after: Vec<(&str, &str)> =
            filters.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let after = next.to_string();
        with_after.push(("after", &after));
        list_href(&with_after)
    });
    // A rare filter's page stops after reading its share of ids.
    let cut_short = older.is_some() && (jobs.len() as i64) < PAGE;
    let body = html! {
        form.filters method="get" action="/ui/jobs" {
            div {
                label for="f-state" { "State" }
                select #f-state name="state" {
                    option value="" { "any" }
                    @for s in JobState::ALL {
                        option value=(s.as_str()) selected[value_of("state") == s.as_str()] { (s.as_str()) }
                    }
                }
            }
            div { label for="f-queue" { "Queue" } input #f-queue name="queue" value=(value_of("queue")); }
            div { label for="f-type" { "Type" } input #f-type name="type" value=(value_of("type")); }
            div { label for="f-code" { "Error code" } input #f-code name="errorCode" value=(value_of("errorCode")); }
            div { label for="f-tenant" { "Tenant" } input #f-tenant name="tenant" value=(value_of("tenant")); }
            div { label for="f-id" { "Job id starts with" } input #f-id name="id" value=(value_of("id")) spellcheck="false"; }
            div.actions { button type="submit" { "Filter" } a href="/ui/jobs" { "Clear" } }
        }
        div.table-wrap {
            table.cards-on-phone #jobs {
                thead { tr {
                    th { "Job" } th { "Type" } th { "Queue" } th { "State" }
                    th.num { "Attempts" } th { "Created" } th { "Last error" }
                } }
                tbody {
                    @for job in jobs {
                        tr {
                            td.nowrap data-label="Job" {
                                a.mono.job-id href=(format!("/ui/jobs/{}", job.job_id)) { (job.job_id) }
                            }
                            td data-label="Type" { (job.job_type) }
                            td.queue data-label="Queue" {
                                (job.queue)
                                (for_tenant(job.tenant.as_deref()))
                            }
                            td data-label="State" { (state_badge(job.state)) }
                            td.num data-label="Attempts" { (job.attempt_count) " / " (job.max_attempts) }
                            td.nowrap data-label="Created" { (time(job.created_at)) }
                            td.error-text data-label="Last error" {
                                @if let Some(code) = &job.last_error_code { code { (code) } " " }
                                @if let Some(error) = &job.last_error { (truncate(error, 120)) }
                            }
                        }
                    }
                    @if jobs.is_empty() && !cut_short {
                        tr { td.empty colspan="7" { "No job matches." } }
                    }
                }
            }
        }
        @if cut_short {
            p.muted #cut-short {
                "This page read up to " (count(jobwire_core::LIST_SCAN_ROWS)) " jobs of each table and found "
                @if jobs.is_empty() { "no match" } @else { "only " (jobs.len()) }
                "; older jobs are not read yet. “Older →” reads on."
            }
        }
        div.pager {
            @if before.is_some() {
                a href=(list_href(&filters.iter().map(|(n, v)| (*n, v.as_str())).collect::<Vec<_>>())) { "← Newest" }
            } @else { span {} }
            @if let Some(older) = older { a #older href=(older) { "Older →" } }
        }
    };
    Ok(page("Jobs", Section::Jobs, Some(&viewer), body))
}

/// What the page was sent back with after an action.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowQuery {
    done: Option<String>,
}

/// `GET /ui/jobs/{id}`.
pub(crate) async fn show(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiJobId(job_id): UiJobId,
    UiQuery(query): UiQuery<ShowQuery>,
) -> Result<Markup, UiError> {
    let (job, audit) = tokio::try_join!(
        jobwire_core::job_status(&state.pool, job_id),
        jobwire_core::job_audit_trail(&state.pool, job_id, AUDIT_SHOWN),
    )?;
    // Fixed messages only: nothing from the query string reaches the page.
    let done = query.done.as_deref().and_then(|done| match done {
        "cancelled" => Some("Cancelled.".to_owned()),
        "cancel-requested" => Some(
            "Cancel requested: the job is running, and its handler sees the request at its next heartbeat."
                .to_owned(),
        ),
        "replayed" => Some("Replayed: the job is QUEUED again with a fresh attempt budget.".to_owned()),
        _ => None,
    });
    let payload =
        serde_json::to_string_pretty(&job.payload).unwrap_or_else(|_| job.payload.to_string());
    let body = html! {
        (notice(done))
        div.actions {
            (state_badge(job.state))
            @if job.archived { span.badge { "in history" } }
            @if viewer.can(Scope::Write) {
                @if can_cancel(&job) {
                    a.button.secondary href=(format!("/ui/jobs/{job_id}/cancel")) { "Cancel…" }
                }
                @if job.state == JobState::Failed && !job.archived {
                    a.button href=(format!("/ui/jobs/{job_id}/replay")) { "Replay…" }
                }
            }
        }
        section.panel {
            dl.fields #job-fields {
                dt { "Id" } dd.mono { (job.job_id) }
                dt { "Type" } dd { (job.job_type) }
                dt { "Queue" } dd { a href=(list_href(&[("queue", &job.queue)])) { (job.queue) } }
                dt { "Tenant" } dd #job-tenant {
                    @if let Some(tenant) = &job.tenant { (tenant) } @else { span.muted { "—" } }
                }
                dt { "State" } dd #job-state { (job.state.as_str()) }
                dt { "Priority" } dd { (job.priority) }
                dt { "Attempts" } dd { (job.attempt_count) " of " (job.max_attempts) }
                dt { "Next attempt" } dd {
                    @if job.state.is_claimable() { (time(job.run_after)) } @else { span.muted { "—" } }
                }
                dt { "Created" } dd { (time(job.created_at)) }
                dt { "Updated" } dd { (time(job.updated_at)) }
                dt { "Finished" } dd { (maybe_time(job.finished_at)) }
                dt { "Lease holder" } dd {
                    @if let Some(owner) = &job.lease_owner { span.mono { (owner) } } @else { span.muted { "—" } }
                }
                dt { "Lease expires" } dd { (maybe_time(job.lease_expires_at)) }
                dt { "Last heartbeat" } dd { (maybe_time(job.heartbeat_at)) }
                dt { "Lease generation" } dd { (job.lease_generation.0) }
                dt { "Lease last expired" } dd { (maybe_time(job.lease_expired_at)) }
                dt { "Idempotency key" } dd {
                    @if let Some(key) = &job.dedup_key { span.mono { (key) } } @else { span.muted { "—" } }
                }
                @if let Some(schedule) = &job.schedule_name {
                    dt { "Schedule" } dd {
                        a href="/ui/schedules" { (schedule) }
                        @if let Some(at) = job.scheduled_for { ", occurrence of " (time(at)) }
                    }
                }
            }
        }
        h2 { "Last error" }
        @if job.last_error_code.is_some() || job.last_error.is_some() {
            section.panel {
                @if let Some(code) = &job.last_error_code { p { code #last-error-code { (code) } } }
                @if let Some(error) = &job.last_error { pre #last-error { (error) } }
            }
        } @else {
            p.muted { "None: no attempt has failed." }
        }
        h2 { "Payload" }
        pre #payload { (payload) }
        h2 { "Audit trail" }
        div.table-wrap {
            table.cards-on-phone #audit {
                thead { tr { th { "When" } th { "Action" } th { "Who" } th { "Reason" } } }
                tbody {
                    @for entry in &audit {
                        tr {
                            td.nowrap data-label="When" { (time(entry.created_at)) }
                            td data-label="Action" { (entry.action) }
                            td data-label="Who" { (entry.actor) }
                            td data-label="Reason" { (entry.reason.as_deref().unwrap_or("")) }
                        }
                    }
                    @if audit.is_empty() {
                        tr { td.empty colspan="4" { "No operator has acted on this job." } }
                    }
                }
            }
        }
    };
    Ok(page(
        &format!("Job · {}", job.job_type),
        Section::Jobs,
        Some(&viewer),
        body,
    ))
}

fn can_cancel(job: &JobStatus) -> bool {
    !job.archived
        && matches!(
            job.state,
            JobState::Queued | JobState::RetryWait | JobState::Running
        )
}

/// A confirmation page for `action` on `job`: what will happen, one form.
fn confirmation(
    viewer: &Viewer,
    job: &JobStatus,
    action: &str,
    explain: Markup,
    button: &str,
) -> Markup {
    let body = html! {
        section.panel.confirm {
            p { (explain) }
            dl.fields {
                dt { "Job" } dd.mono { (job.job_id) }
                dt { "Type" } dd { (job.job_type) }
                dt { "Queue" } dd { (job.queue) }
                dt { "State" } dd { (job.state.as_str()) }
                @if let Some(error) = &job.last_error { dt { "Last error" } dd { (truncate(error, 200)) } }
            }
            form.actions method="post" action=(format!("/ui/jobs/{}/{action}", job.job_id)) {
                (viewer.csrf_field())
                button.danger[action == "cancel"] type="submit" { (button) }
                a href=(format!("/ui/jobs/{}", job.job_id)) { "Back" }
            }
        }
    };
    page(&format!("{button}?"), Section::Jobs, Some(viewer), body)
}

/// `GET /ui/jobs/{id}/cancel`: are you sure?
pub(crate) async fn confirm_cancel(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiJobId(job_id): UiJobId,
) -> Result<Markup, UiError> {
    viewer.require(Scope::Write)?;
    let job = jobwire_core::job_status(&state.pool, job_id).await?;
    let explain = if job.state == JobState::Running {
        html! { "This job is running: its handler is asked to stop at its next heartbeat, and the job ends CANCELLED when it does." }
    } else {
        html! { "This job will not run: it becomes CANCELLED now." }
    };
    Ok(confirmation(
        &viewer,
        &job,
        "cancel",
        explain,
        "Cancel this job",
    ))
}

/// `POST /ui/jobs/{id}/cancel`.
pub(crate) async fn cancel(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiJobId(job_id): UiJobId,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    viewer.authorize(&form.csrf, Scope::Write)?;
    let done = match jobwire_core::request_cancel(&state.pool, job_id, &viewer.token.name).await? {
        RequestCancelOutcome::Cancelled => "cancelled",
        _ => "cancel-requested",
    };
    Ok(Redirect::to(&format!("/ui/jobs/{job_id}?done={done}")).into_response())
}

/// `GET /ui/jobs/{id}/replay`: are you sure?
pub(crate) async fn confirm_replay(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiJobId(job_id): UiJobId,
) -> Result<Markup, UiError> {
    viewer.require(Scope::Write)?;
    let job = jobwire_core::job_status(&state.pool, job_id).await?;
    let explain =
        html! { "This dead letter goes back to QUEUED with its attempts reset, and runs again." };
    Ok(confirmation(
        &viewer,
        &job,
        "replay",
        explain,
        "Replay this job",
    ))
}

/// `POST /ui/jobs/{id}/replay`.
pub(crate) async fn replay(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiJobId(job_id): UiJobId,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    viewer.authorize(&form.csrf, Scope::Write)?;
    jobwire_core::replay_dead_job(
        &state.pool,
        job_id,
        &viewer.token.name,
        "replayed from the dashboard",
    )
    .await?;
    Ok(Redirect::to(&format!("/ui/jobs/{job_id}?done=replayed")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_links_escape_their_filters() {
        assert_eq!(
            list_href(&[("type", "a&b c"), ("queue", "<q>")]),
            "/ui/jobs?type=a%26b+c&queue=%3Cq%3E"
        );
    }
}
