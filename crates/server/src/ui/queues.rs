//! `/ui/queues`: each queue's path and pause, and pausing or resuming it.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use jobwire_core::Scope;
use maud::{Markup, html};

use super::error::UiError;
use super::extract::{UiForm, UiPath};
use super::format::{age, count, dispatch_path, path_segment};
use super::layout::{Section, page};
use super::session::{ActionForm, Viewer};
use crate::api::ApiState;
use crate::api::extract::check_queue_name;

fn action_href(name: &str, action: &str) -> String {
    format!("/ui/queues/{}/{action}", path_segment(name))
}

/// `GET /ui/queues`.
pub(crate) async fn list(viewer: Viewer, State(state): State<ApiState>) -> Result<Markup, UiError> {
    let queues = jobwire_core::queue_overview(&state.pool).await?;
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
                            td data-label="Queue" { (queue.queue) }
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
                                    form.inline method="post" action=(action_href(&queue.queue, action)) {
                                        (viewer.csrf_field())
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
    queue: String,
    csrf: &str,
    paused: bool,
) -> Result<Response, UiError> {
    viewer.authorize(csrf, Scope::Admin)?;
    check_queue_name(&queue)?;
    jobwire_core::set_queue_paused(&state.pool, &queue, paused).await?;
    tracing::info!(actor = %viewer.token.name, %queue, paused, "queue pause changed from the dashboard");
    Ok(Redirect::to("/ui/queues").into_response())
}

/// `POST /ui/queues/{name}/pause`.
pub(crate) async fn pause(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiPath(queue): UiPath,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    set_paused(viewer, state, queue, &form.csrf, true).await
}

/// `POST /ui/queues/{name}/resume`.
pub(crate) async fn resume(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiPath(queue): UiPath,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    set_paused(viewer, state, queue, &form.csrf, false).await
}

#[cfg(test)]
mod tests {
    use super::action_href;

    #[test]
    fn queue_names_are_escaped_as_path_segments() {
        assert_eq!(action_href("bulk", "pause"), "/ui/queues/bulk/pause");
        assert_eq!(
            action_href("a b/c", "resume"),
            "/ui/queues/a%20b%2Fc/resume"
        );
    }
}
