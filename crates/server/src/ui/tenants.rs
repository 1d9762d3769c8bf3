//! `/ui/tenants`: per queue with tenant limits, each tenant's running jobs
//! against its cap, its waiting jobs against its limit, and its enqueue
//! rate. The question at 3 a.m.: which tenant holds the slots, and who is
//! waiting behind a cap. An admin can give a tenant a cap of its own there,
//! or remove it.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use jobwire_core::{MAX_LIMIT, QueueLimits, Scope, TenantCap, TenantCaps};
use maud::{Markup, html};
use serde::Deserialize;

use super::error::UiError;
use super::extract::{UiForm, UiQuery, given};
use super::format::{count, href};
use super::jobs::list_href;
use super::layout::{Section, notice, page};
use super::session::Viewer;
use crate::api::ApiState;
use crate::api::error::ApiError;
use crate::api::extract::{QUEUE_NAME_RULE, check_queue_name};

/// Tenants shown per queue when every queue is on the page; the queue's own
/// page shows them all.
const SHOWN_PER_QUEUE: usize = 25;

/// `?queue=`: one queue, every tenant of it; `done`: what the last change
/// did.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantsQuery {
    queue: Option<String>,
    done: Option<String>,
}

/// A tenant's own cap, set from its row. The queue and the tenant ride in
/// the form, not in the path: either may be `.` or `..`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    max_running: String,
    /// The Remove button: take the tenant's own cap away (the queue's
    /// default applies, if it has one), whatever `max_running` says.
    #[serde(default)]
    remove: Option<String>,
}

/// One queue's section: its own limits, and its tenants' caps.
struct QueueTenants {
    limits: QueueLimits,
    caps: TenantCaps,
}

/// `/ui/tenants?queue=…`.
pub(crate) fn tenants_of_queue_href(queue: &str) -> String {
    href("/ui/tenants", &[("queue", queue)])
}

/// The slots the tenant holds: its running jobs', and on a broker queue
/// those handed to waiting jobs whose wake-up is on its way.
fn held(tenant: &TenantCap) -> i64 {
    tenant.running + tenant.starting
}

/// Whether the tenant holds as many slots as its cap allows (or more, after
/// the cap was lowered): its next job waits for one of them to free.
fn at_cap(tenant: &TenantCap) -> bool {
    tenant
        .max_running
        .is_some_and(|cap| held(tenant) >= i64::from(cap))
}

/// Whether the cap holds the tenant back now: at (or over) its cap, with jobs
/// waiting for a slot behind it (the starting ones, counted among the
/// waiting, hold one).
fn held_back(tenant: &TenantCap) -> bool {
    at_cap(tenant) && tenant.waiting > tenant.starting
}

/// Whether the tenant has as many jobs waiting as it may: its enqueues are
/// refused until some start.
fn full(tenant: &TenantCap) -> bool {
    tenant
        .limits
        .max_queued
        .is_some_and(|max| tenant.waiting >= i64::from(max))
}

/// The busiest first: tenants held back by their cap, then by waiting and
/// running jobs, then by name.
fn busiest_first(tenants: &mut [TenantCap]) {
    tenants.sort_by(|a, b| {
        held_back(b)
            .cmp(&held_back(a))
            .then(b.waiting.cmp(&a.waiting))
            .then(b.running.cmp(&a.running))
            .then(a.tenant.cmp(&b.tenant))
    });
}

/// `GET /ui/tenants`.
pub(crate) async fn list(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiQuery(query): UiQuery<TenantsQuery>,
) -> Result<Markup, UiError> {
    let only = given(&query.queue);
    let queues = match &only {
        Some(queue) => {
            // As the jobs list answers a blank filter: the query is wrong.
            jobwire_core::validate_queue(queue).map_err(|_| {
                UiError::bad_request("INVALID_QUERY", format!("queue: {QUEUE_NAME_RULE}"))
            })?;
            vec![queue.clone()]
        }
        None => jobwire_core::queues_with_tenant_limits(&state.pool).await?,
    };
    let mut sections = Vec::with_capacity(queues.len());
    for queue in &queues {
        let limits = jobwire_core::queue_limits(&state.pool, queue).await?;
        let mut caps = jobwire_core::tenant_caps(&state.pool, queue).await?;
        busiest_first(&mut caps.tenants);
        // A queue asked for by name may have no tenant limits at all.
        if !caps.tenants.is_empty() || !caps.defaults.is_empty() {
            sections.push(QueueTenants { limits, caps });
        }
    }
    let admin = viewer.can(Scope::Admin);
    // The notice is one of these fixed texts: `done` itself never reaches
    // the page.
    let done = query.done.as_deref().and_then(|done| match done {
        "cap-set" => Some(
            "Cap set. Jobs already running are not stopped; a raised cap's new slots go to the \
             tenant's waiting jobs now."
                .to_owned(),
        ),
        "cap-removed" => Some(
            "The tenant's own cap is removed: the queue's default applies, or none if the queue \
             has none; its other limits stay."
                .to_owned(),
        ),
        _ => None,
    });
    let shown = if only.is_some() {
        usize::MAX
    } else {
        SHOWN_PER_QUEUE
    };
    let body = html! {
        (notice(done))
        p.muted {
            "The tenants " code { "jobwire tenant list" } " shows, the ones their cap holds back first. "
            @if admin {
                "A tenant's own cap is set in its row; other limits with "
            } @else {
                "Limits are set with "
            }
            code { "jobwire tenant set" } ", " code { "jobwire queue limit" } " or the API."
        }
        @if let Some(queue) = &only {
            p { a href="/ui/tenants" { "← Every queue with tenant limits" } }
            @if sections.is_empty() {
                div.panel.no-tenants { "Queue " code { (queue) } " has no tenant limits." }
            }
        } @else if sections.is_empty() {
            div.panel { "No queue has tenant limits: every tenant's jobs run and enqueue as their queue allows." }
        }
        @for section in &sections {
            (queue_section(section, shown, admin.then_some(&viewer)))
        }
    };
    Ok(page("Tenants", Section::Tenants, Some(&viewer), body))
}

/// `POST /ui/tenants/cap`: give a tenant a cap of its own, or remove it.
pub(crate) async fn set_cap(
    viewer: Viewer,
    State(state): State<ApiState>,
    UiForm(form): UiForm<CapForm>,
) -> Result<Response, UiError> {
    viewer.authorize(&form.csrf, Scope::Admin)?;
    check_queue_name(&form.queue)?;
    jobwire_core::validate_tenant(&form.tenant)?;
    let max_running = if form.remove.is_some() {
        None
    } else {
        // Only the number is read here; its range (1 to MAX_LIMIT) is
        // checked by set_tenant_cap, as for the CLI and the API.
        let text = form.max_running.trim();
        Some(text.parse::<u32>().map_err(|_| {
            ApiError::invalid_field(
                "max_running",
                format!(
                    "{text:?} is not a cap: a whole number from 1 to {} (Remove takes the tenant's own cap away)",
                    count(MAX_LIMIT)
                ),
            )
        })?)
    };
    jobwire_core::set_tenant_cap(&state.pool, &form.queue, Some(&form.tenant), max_running).await?;
    tracing::info!(
        actor = %viewer.token.name,
        queue = %form.queue,
        tenant = %form.tenant,
        ?max_running,
        "tenant cap changed from the dashboard"
    );
    let done = if max_running.is_some() {
        "cap-set"
    } else {
        "cap-removed"
    };
    let back = href("/ui/tenants", &[("queue", &form.queue), ("done", done)]);
    Ok(Redirect::to(&back).into_response())
}

/// What a queue allows: its own enqueue limits and its tenants' defaults.
fn queue_limits_text(section: &QueueTenants) -> Markup {
    let defaults = &section.caps.defaults;
    html! {
        p.muted.limits {
            "Each tenant: "
            @if defaults.is_empty() {
                "no default limit; only the tenants below with limits of their own are limited."
            } @else {
                (describe_limits(defaults))
                "."
            }
            @if let Some(max) = section.limits.max_queued {
                " The queue: at most " (count(max)) " waiting."
            }
            @if let Some(shed) = section.limits.shed {
                " From " (count(shed.depth)) " waiting, only jobs of priority " (shed.priority) " or more urgent (a lower number) are taken."
            }
        }
    }
}

fn describe_limits(limits: &jobwire_core::TenantLimits) -> String {
    let mut parts = Vec::new();
    if let Some(n) = limits.max_running {
        parts.push(format!("at most {} running", count(n)));
    }
    if let Some(n) = limits.max_queued {
        parts.push(format!("at most {} waiting", count(n)));
    }
    if let Some(rate) = limits.enqueue_rate {
        parts.push(format!("enqueues at most {rate}"));
    }
    parts.join(", ")
}

/// `(own)` after a limit the tenant set itself.
fn own(is_own: bool) -> Markup {
    html! { @if is_own { " " span.muted.own { "(own)" } } }
}

/// The form that sets a tenant's own cap, or removes it (admins only).
fn cap_form(viewer: &Viewer, queue: &str, tenant: &TenantCap) -> Markup {
    let own_cap = tenant.overrides.max_running;
    let current = own_cap.map(|cap| cap.to_string()).unwrap_or_default();
    html! {
        form.inline.cap method="post" action="/ui/tenants/cap" {
            (viewer.csrf_field())
            input type="hidden" name="queue" value=(queue);
            input type="hidden" name="tenant" value=(tenant.tenant);
            input.cap type="number" name="max_running" min="1" max=(MAX_LIMIT) required value=(current)
                aria-label=(format!("Own cap on running jobs of {}", tenant.tenant));
            " "
            button.small.secondary type="submit" { "Set" }
            @if own_cap.is_some() {
                " "
                // Whatever the field holds: the browser must not refuse it.
                button.small.secondary.remove type="submit" name="remove" value="1" formnovalidate { "Remove" }
            }
        }
    }
}

fn queue_section(section: &QueueTenants, shown: usize, admin: Option<&Viewer>) -> Markup {
    let queue = &section.caps.queue;
    let tenants = &section.caps.tenants;
    html! {
        section.tenants data-queue=(queue) {
            h2 { "Queue " code { (queue) } }
            (queue_limits_text(section))
            div.table-wrap {
                table.cards-on-phone.tenant-table {
                    thead { tr {
                        th { "Tenant" } th.num { "Running" } th.num { "Waiting" } th { "Rate limit" }
                        @if admin.is_some() { th { "Own cap" } }
                    } }
                    tbody {
                        @for tenant in tenants.iter().take(shown) {
                            tr data-tenant=(tenant.tenant) {
                                td.queue data-label="Tenant" {
                                    a href=(list_href(&[("queue", queue.as_str()), ("tenant", tenant.tenant.as_str())])) { (tenant.tenant) }
                                }
                                td.num.running data-label="Running" {
                                    // Running jobs are counted by the slots they hold: a
                                    // tenant without a cap holds none.
                                    @if let Some(cap) = tenant.max_running {
                                        (count(tenant.running)) " of " (count(cap)) (own(tenant.overrides.max_running.is_some()))
                                        @if tenant.starting > 0 {
                                            ", " span.starting title="Handed a freed slot; their wake-up is on its way" {
                                                (count(tenant.starting)) " starting"
                                            }
                                        }
                                        @if held(tenant) > i64::from(cap) {
                                            " " span.badge.waiting { "over cap" }
                                        } @else if held_back(tenant) {
                                            " " span.badge.waiting { "held back" }
                                        } @else if at_cap(tenant) {
                                            " " span.badge { "at cap" }
                                        }
                                    } @else {
                                        span.muted { "no cap" }
                                    }
                                }
                                td.num.waiting data-label="Waiting" {
                                    (count(tenant.waiting))
                                    @if let Some(max) = tenant.limits.max_queued {
                                        " of " (count(max)) (own(tenant.overrides.max_queued.is_some()))
                                        @if full(tenant) { " " span.badge.failed { "full" } }
                                    }
                                }
                                td.rate data-label="Rate limit" {
                                    @if let Some(rate) = tenant.limits.enqueue_rate {
                                        (rate) (own(tenant.overrides.enqueue_rate.is_some()))
                                    } @else {
                                        span.muted { "—" }
                                    }
                                }
                                @if let Some(viewer) = admin {
                                    td.nowrap data-label="Own cap" { (cap_form(viewer, queue, tenant)) }
                                }
                            }
                        }
                        @if tenants.is_empty() {
                            tr { td.empty colspan=(if admin.is_some() { 5 } else { 4 }) { "No tenant has limits of its own or has held a slot under a cap lately." } }
                        }
                    }
                }
            }
            @if tenants.len() > shown {
                p {
                    a href=(tenants_of_queue_href(queue)) { "All " (count(tenants.len() as i64)) " tenants of " (queue) " →" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobwire_core::TenantLimits;

    fn tenant(name: &str, cap: Option<i32>, running: i64, waiting: i64) -> TenantCap {
        TenantCap {
            tenant: name.into(),
            override_max_running: None,
            max_running: cap,
            overrides: TenantLimits::default(),
            limits: TenantLimits {
                max_running: cap.map(|cap| cap as u32),
                ..TenantLimits::default()
            },
            running,
            starting: 0,
            waiting,
        }
    }

    #[test]
    fn tenants_their_cap_holds_back_come_first_then_the_longest_queues() {
        let mut tenants = vec![
            tenant("quiet", Some(3), 0, 0),
            tenant("backlog", Some(3), 1, 900),
            tenant("capped-small", Some(3), 3, 2),
            tenant("capped-big", Some(3), 3, 5_000),
            tenant("at-cap-idle", Some(3), 3, 0),
            tenant("over-cap", Some(2), 3, 1),
            tenant("uncapped", None, 0, 10),
            // Two running and its third slot handed to a waiting job: at
            // its cap, as the claim sees it.
            TenantCap {
                starting: 1,
                ..tenant("handed", Some(3), 2, 4)
            },
        ];
        busiest_first(&mut tenants);
        let order: Vec<&str> = tenants.iter().map(|t| t.tenant.as_str()).collect();
        assert_eq!(
            order,
            [
                "capped-big",
                "handed",
                "capped-small",
                "over-cap",
                "backlog",
                "uncapped",
                "at-cap-idle",
                "quiet"
            ]
        );
    }
}
