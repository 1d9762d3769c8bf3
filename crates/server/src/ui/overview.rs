//! `/ui`: is anything backed up, failing or stuck? Per queue: its dispatch
//! path, pause, depth by state, the age of its oldest runnable job and an
//! hour of finished jobs per minute; then the relay's outbox and the hour's
//! lease expiries.

use std::collections::BTreeMap;

use axum::extract::State;
use maud::{Markup, html};

use super::chart::{self, Minutes};
use super::error::UiError;
use super::format::{age, count, dispatch_path};
use super::layout::{Section, page};
use super::session::Viewer;
use crate::api::ApiState;

/// `GET /ui`.
pub(crate) async fn overview(
    viewer: Viewer,
    State(state): State<ApiState>,
) -> Result<Markup, UiError> {
    let pool = &state.pool;
    let (queues, finished, outbox, lease_expiries) = tokio::try_join!(
        jobwire_core::queue_overview(pool),
        jobwire_core::finished_per_minute(pool, chart::MINUTES as i32),
        jobwire_core::store::outbox_health(pool),
        jobwire_core::lease_expiries_since(pool, 3600.0),
    )?;
    let mut per_queue: BTreeMap<&str, Minutes> = BTreeMap::new();
    let mut all: Minutes = [0; chart::MINUTES];
    for minute in &finished {
        let bars = per_queue
            .entry(minute.queue.as_str())
            .or_insert([0; chart::MINUTES]);
        chart::add(bars, minute.minutes_ago, minute.finished);
        chart::add(&mut all, minute.minutes_ago, minute.finished);
    }
    let empty = [0; chart::MINUTES];
    let runnable: i64 = queues.iter().map(|q| q.queued + q.retry_wait).sum();
    let running: i64 = queues.iter().map(|q| q.running + q.cancel_requested).sum();
    let failed: i64 = queues.iter().map(|q| q.failed).sum();
    let oldest = queues
        .iter()
        .filter_map(|q| q.oldest_runnable_age_s)
        .fold(None, |oldest: Option<f64>, age| {
            Some(oldest.map_or(age, |o| o.max(age)))
        });
    let body = html! {
        div.cards {
            div.card { div.label { "Waiting" } div.value { (count(runnable)) }
                       div.hint { "queued and retry-wait" } }
            div.card { div.label { "Running" } div.value { (count(running)) } }
            div.card {
                div.label { "Oldest runnable job" }
                div.value { @if let Some(oldest) = oldest { (age(oldest)) } @else { "—" } }
                div.hint { "how long the longest-waiting due job has waited" }
            }
            div.card {
                div.label { "Dead letters" }
                div.value.warn[failed > 0] { (count(failed)) }
                div.hint { a href="/ui/dead-letters" { "by type and error" } }
            }
            div.card {
                div.label { "Lease expiries, last hour" }
                div.value.warn[lease_expiries > 0] { (count(lease_expiries)) }
                div.hint { "jobs whose worker died or froze (each counted once)" }
            }
        }
        h2 { "Finished per minute, all queues" }
        (chart::chart(&all))
        h2 { "Queues" }
        div.table-wrap {
            table.cards-on-phone {
                thead { tr {
                    th { "Queue" } th { "Path" }
                    th.num { "Queued" } th.num { "Running" } th.num { "Retry wait" }
                    th.num { "Failed" } th.num { "Succeeded" } th.num { "Cancelled" }
                    th.num { "Oldest runnable" } th { "Last hour" }
                } }
                tbody {
                    @for queue in &queues {
                        tr {
                            td data-label="Queue" {
                                a href=(super::jobs::list_href(&[("queue", &queue.queue)])) { (queue.queue) }
                                @if queue.paused { " " span.badge.paused { "paused" } }
                            }
                            td data-label="Path" {
                                (dispatch_path(queue))
                            }
                            td.num data-label="Queued" { (count(queue.queued)) }
                            td.num data-label="Running" { (count(queue.running + queue.cancel_requested)) }
                            td.num data-label="Retry wait" { (count(queue.retry_wait)) }
                            td.num data-label="Failed" { (count(queue.failed)) }
                            td.num data-label="Succeeded" { (count(queue.succeeded)) }
                            td.num data-label="Cancelled" { (count(queue.cancelled)) }
                            td.num data-label="Oldest runnable" {
                                @if let Some(oldest) = queue.oldest_runnable_age_s { (age(oldest)) } @else { "—" }
                            }
                            td data-label="Last hour" {
                                (chart::sparkline(per_queue.get(queue.queue.as_str()).unwrap_or(&empty)))
                            }
                        }
                    }
                    @if queues.is_empty() {
                        tr { td.empty colspan="10" { "No queues yet: enqueue a job and it shows here." } }
                    }
                }
            }
        }
        p.muted { "Depth counts the hot table; finished jobs move to history with retention. The chart counts both." }
        h2 { "Relay" }
        div.cards {
            div.card { div.label { "Outbox rows waiting" } div.value { (count(outbox.waiting)) }
                       div.hint { (count(outbox.due)) " of them due" } }
            div.card { div.label { "Oldest due row" }
                       div.value.warn[outbox.oldest_due_age_s > 60.0] {
                           @if outbox.due > 0 { (age(outbox.oldest_due_age_s)) } @else { "—" }
                       }
                       div.hint { "how far the relay is behind" } }
            div.card { div.label { "Dead outbox rows" } div.value.warn[outbox.dead > 0] { (count(outbox.dead)) }
                       div.hint { "see " code { "jobwire outbox dead-letters" } } }
        }
    };
    Ok(page("Overview", Section::Overview, Some(&viewer), body))
}
