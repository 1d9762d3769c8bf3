//! `/ui/dead-letters`: FAILED jobs grouped by type and error code, the way
//! into each group's jobs, and "retry this group" — the API's batched
//! retry, after a confirmation that says how many jobs it will requeue.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use jobwire_core::{ReplayFilter, Scope};
use maud::{Markup, html};
use serde::Deserialize;

use super::error::UiError;
use super::extract::{UiForm, UiQuery, given};
use super::format::{count, href, maybe_time, time};
use super::jobs::list_href;
use super::layout::{Section, notice, page};
use super::session::Viewer;
use crate::api::ApiState;
use crate::api::dead_letter::RETRY_BATCH;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupsQuery {
    /// How many jobs the last retry requeued.
    requeued: Option<u64>,
}

/// `GET /ui/dead-letters`.
pub(crate) async fn groups(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiQuery(query): UiQuery<GroupsQuery>,
) -> Result<Markup, UiError> {
    let groups = jobwire_core::dead_letter_groups(&state.pool).await?;
    let done = query.requeued.map(|n| {
        // Clamped, not wrapped: any link can carry any number here.
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        format!("Requeued {} jobs; they run again now.", count(n))
    });
    let body = html! {
        (notice(done))
        div.table-wrap {
            table.cards-on-phone #dead-letter-groups {
                thead { tr {
                    th { "Type" } th { "Error code" } th.num { "Jobs" }
                    th { "First failure" } th { "Last failure" } th { "Newest error" } th {}
                } }
                tbody {
                    @for group in &groups {
                        @let code = group.last_error_code.as_deref().unwrap_or("");
                        tr data-type=(group.job_type) data-code=(code) {
                            td data-label="Type" { (group.job_type) }
                            td data-label="Error code" {
                                @if code.is_empty() { span.muted { "none" } } @else { code { (code) } }
                            }
                            td.num.group-count data-label="Jobs" { (count(group.jobs)) }
                            td.nowrap data-label="First failure" { (maybe_time(group.first_failed_at)) }
                            td.nowrap data-label="Last failure" { (maybe_time(group.last_failed_at)) }
                            td.error-text data-label="Newest error" { (group.sample_error.as_deref().unwrap_or("")) }
                            td.nowrap data-label="" {
                                a href=(list_href(&[("state", "FAILED"), ("type", &group.job_type), ("errorCode", code)])) { "Jobs" }
                                // A group without a code cannot be named to the bulk
                                // retry apart from the rest of its type.
                                @if viewer.can(Scope::Admin) && !code.is_empty() {
                                    " · "
                                    a.retry href=(retry_href(&group.job_type, code)) { "Retry…" }
                                }
                            }
                        }
                    }
                    @if groups.is_empty() {
                        tr { td.empty colspan="7" { "No dead letters." } }
                    }
                }
            }
        }
        p.muted { "Dead letters are FAILED jobs in the hot table; retention moves them to history after a while." }
    };
    Ok(page(
        "Dead letters",
        Section::DeadLetters,
        Some(&viewer),
        body,
    ))
}

fn retry_href(job_type: &str, error_code: &str) -> String {
    href(
        "/ui/dead-letters/retry",
        &[("type", job_type), ("errorCode", error_code)],
    )
}

/// A group, as named by the links and the form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupQuery {
    #[serde(rename = "type")]
    job_type: Option<String>,
    #[serde(rename = "errorCode")]
    error_code: Option<String>,
}

fn named_group(
    job_type: &Option<String>,
    error_code: &Option<String>,
) -> Result<(String, String), UiError> {
    match (given(job_type), given(error_code)) {
        (Some(job_type), Some(error_code)) => Ok((job_type, error_code)),
        _ => Err(UiError::bad_request(
            "FILTER_REQUIRED",
            "Name the group to retry: its type and its error code.",
        )),
    }
}

/// `GET /ui/dead-letters/retry?type=…&errorCode=…`: how many jobs, and a
/// form that retries exactly those that had failed by now.
pub(crate) async fn confirm_retry(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiQuery(query): UiQuery<GroupQuery>,
) -> Result<Markup, UiError> {
    viewer.require(Scope::Admin)?;
    let (job_type, error_code) = named_group(&query.job_type, &query.error_code)?;
    let (groups, now) = tokio::try_join!(
        jobwire_core::dead_letter_groups(&state.pool),
        jobwire_core::database_now(&state.pool),
    )?;
    let jobs = groups
        .iter()
        .find(|g| g.job_type == job_type && g.last_error_code.as_deref() == Some(&error_code))
        .map_or(0, |g| g.jobs);
    let body = html! {
        section.panel.confirm {
            @if jobs == 0 {
                p { "This group is empty now: nothing to retry." }
                p { a href="/ui/dead-letters" { "Back to the dead letters" } }
            } @else {
                p #retry-summary {
                    "Retry " strong { (count(jobs)) } " FAILED jobs of type " code { (job_type) }
                    " whose last error is " code { (error_code) } "?"
                }
                p.muted {
                    "Each goes back to QUEUED with its attempts reset, in batches of "
                    (count(RETRY_BATCH)) " that commit on their own. Only jobs that had failed by "
                    (time(now)) " are retried, so a job failing again meanwhile is not picked up twice."
                }
                form.actions method="post" action="/ui/dead-letters/retry" {
                    (viewer.csrf_field())
                    input type="hidden" name="type" value=(job_type);
                    input type="hidden" name="errorCode" value=(error_code);
                    input type="hidden" name="until" value=(now.to_rfc3339());
                    button type="submit" { "Retry " (count(jobs)) " jobs" }
                    a href="/ui/dead-letters" { "Back" }
                }
            }
        }
    };
    Ok(page(
        "Retry a dead-letter group?",
        Section::DeadLetters,
        Some(&viewer),
        body,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryForm {
    #[serde(default)]
    csrf: String,
    #[serde(rename = "type")]
    job_type: Option<String>,
    #[serde(rename = "errorCode")]
    error_code: Option<String>,
    until: Option<String>,
}

/// `POST /ui/dead-letters/retry`.
pub(crate) async fn retry(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiForm(form): UiForm<RetryForm>,
) -> Result<Response, UiError> {
    viewer.authorize(&form.csrf, Scope::Admin)?;
    let (job_type, error_code) = named_group(&form.job_type, &form.error_code)?;
    let until = given(&form.until)
        .map(|text| DateTime::parse_from_rfc3339(&text).map(|at| at.with_timezone(&Utc)))
        .transpose()
        .map_err(|_| UiError::bad_request("INVALID_FORM", "until: not an RFC 3339 time"))?;
    let filter = ReplayFilter {
        job_type: Some(job_type),
        error_code: Some(error_code),
        until,
        limit: i64::MAX,
        ..ReplayFilter::default()
    };
    let replay = jobwire_core::replay_dead_in_batches(
        &state.pool,
        &filter,
        RETRY_BATCH,
        &viewer.token.name,
        "dead-letter group retried from the dashboard",
    )
    .await?;
    tracing::info!(actor = %viewer.token.name, requeued = replay.requeued, "dead letters retried from the dashboard");
    Ok(Redirect::to(&format!("/ui/dead-letters?requeued={}", replay.requeued)).into_response())
}
