//! The frame every dashboard page shares: head, navigation, who is logged
//! in, and the logout form.

use maud::{DOCTYPE, Markup, html};

use super::session::Viewer;

/// Which part of the dashboard a page belongs to (highlighted in the
/// navigation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Jobs,
    DeadLetters,
    Queues,
    Tenants,
    Schedules,
    /// Login and error pages.
    None,
}

const NAVIGATION: [(Section, &str, &str); 6] = [
    (Section::Overview, "/ui", "Overview"),
    (Section::Jobs, "/ui/jobs", "Jobs"),
    (Section::DeadLetters, "/ui/dead-letters", "Dead letters"),
    (Section::Queues, "/ui/queues", "Queues"),
    (Section::Tenants, "/ui/tenants", "Tenants"),
    (Section::Schedules, "/ui/schedules", "Schedules"),
];

/// A whole page titled `title`, with `body` as its content.
pub(crate) fn page(title: &str, section: Section, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · jobwire" }
                link rel="stylesheet" href="/ui/static/app.css";
            }
            body {
                header.top {
                    a.brand href="/ui" { "jobwire" }
                    @if let Some(viewer) = viewer {
                        nav aria-label="Sections" {
                            @for (target, href, label) in NAVIGATION {
                                @if target == section {
                                    a.current href=(href) aria-current="page" { (label) }
                                } @else {
                                    a href=(href) { (label) }
                                }
                            }
                        }
                        form.who method="post" action="/ui/logout" {
                            span { (viewer.token.name) " · " span.scope { (viewer.token.scope) } }
                            (viewer.csrf_field())
                            button.link type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A notice of what the last action did, shown at the top of the page it
/// led back to.
pub(crate) fn notice(text: Option<String>) -> Markup {
    html! {
        @if let Some(text) = text { p.notice role="status" { (text) } }
    }
}
