//! `/ui/queues`: each queue's path and pause, and pausing or resuming it;
//! a queue with tenant limits links to its tenants.

use std::collections::HashSet;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use jobwire_core::Scope;
use maud::{Markup, html};
use serde::Deserialize;

use super::error::UiError;
use super::extract::UiForm;
use super::format::{age, count, dispatch_path};
use super::layout::{Section, page};
use super::session::Viewer;
use super::tenants::tenants_of_queue_href;
use crate::api::ApiState;
use crate::api::extract::check_queue_name;

/// A pause or resume button. The queue rides in the form, not in the path:
/// a queue may be named `.` or `..`, a path segment the browser resolves
/// away (escaped or not) before it sends the form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    queue: String,
}

/// `GET /ui/queues`.
pub(crate) async fn list(viewer: Viewer, State(state): State<ApiState>) -> Result<Markup, UiError> {
    let queues = jobwire_core::queue_overview(&state.pool).await?;
    let with_tenant_limits: HashSet<String> = jobwire_core::queues_with_tenant_limits(&state.pool)
        .await?
        .into_iter()
        .collect();
    let admin = viewer.can(Scope::Admin);
    let body = html! {
        p.muted {
            "A paused queue still accepts jobs, but nothing claims them, on either path, until it is resumed; "
            "resuming wakes its waiting jobs at once."
        }
        div.table-wrap {
            table.cards-on-phone #queues {
                thead { tr {
                    th { "Queue" } th { "Path" } th { "State" }
                    th.num { "Waiting" } th.num { "Running" } th.num { "Oldest runnable" }
                    @if admin { th {} }
                } }
                tbody {
                    @for queue in &queues {
                        tr data-queue=(queue.queue) {
                            td.queue data-label="Queue" {
                                (queue.queue)
                                @if with_tenant_limits.contains(&queue.queue) {
                                    br; a.tenants href=(tenants_of_queue_href(&queue.queue)) { "tenants →" }
                                }
                            }
                            td data-label="Path" {
                                (dispatch_path(queue))
                            }
                            td.queue-state data-label="State" {
                                @if queue.paused { span.badge.paused { "paused" } } @else { span.badge.done { "active" } }
                            }
                            td.num data-label="Waiting" { (count(queue.queued + queue.retry_wait)) }
                            td.num data-label="Running" { (count(queue.running + queue.cancel_requested)) }
                            td.num data-label="Oldest runnable" {
                                @if let Some(oldest) = queue.oldest_runnable_age_s { (age(oldest)) } @else { "—" }
                            }
                            @if admin {
                                td data-label="" {
                                    @let action = if queue.paused { "resume" } else { "pause" };
                                    form.inline method="post" action=(format!("/ui/queues/{action}")) {
                                        (viewer.csrf_field())
                                        input type="hidden" name="queue" value=(queue.queue);
                                        button.small.secondary[!queue.paused] type="submit" {
                                            @if queue.paused { "Resume" } @else { "Pause" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if queues.is_empty() {
                        tr { td.empty colspan="7" { "No queues yet." } }
                    }
                }
            }
        }
    };
    Ok(page("Queues", Section::Queues, Some(&viewer), body))
}

async fn set_paused(
    viewer: Viewer,
    state: ApiState,
    form: QueueForm,
    paused: bool,
) -> Result<Response, UiError> {
    viewer.authorize(&form.csrf, Scope::Admin)?;
    let queue = form.queue;
    check_queue_name(&queue)?;
    jobwire_core::set_queue_paused(&state.pool, &queue, paused).await?;
    tracing::info!(actor = %viewer.token.name, %queue, paused, "queue pause changed from the dashboard");
    Ok(Redirect::to("/ui/queues").into_response())
}

/// `POST /ui/queues/pause` (the form names the queue).
pub(crate) async fn pause(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiForm(form): UiForm<QueueForm>,
) -> Result<Response, UiError> {
    set_paused(viewer, state, form, true).await
}

/// `POST /ui/queues/resume` (the form names the queue).
pub(crate) async fn resume(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiForm(form): UiForm<QueueForm>,
) -> Result<Response, UiError> {
    set_paused(viewer, state, form, false).await
}
