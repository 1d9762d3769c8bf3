//! Logging in and out, the session every page reads, and the CSRF tokens of
//! the forms.
//!
//! The browser keeps a random session secret in an HttpOnly, SameSite=Strict
//! cookie scoped to `/ui` (and Secure behind a TLS proxy); the database keeps its SHA-256
//! (`job_ui_sessions`), so logging out or revoking the token ends the
//! session for good. Each form carries a CSRF token that is a hash of the
//! session secret: a page from elsewhere can neither read the cookie nor
//! compute the token, so its forged POST is refused even by a browser that
//! would send the cookie along.

use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use jobwire_core::{ApiToken, Scope};
use maud::{Markup, html};
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::UiError;
use super::extract::UiForm;
use super::https::came_over_https;
use super::layout::{Section, page};
use crate::api::ApiState;

/// The session cookie: 64 hex digits, the session's secret.
const SESSION_COOKIE: &str = "jobwire_session";
/// The login form's own CSRF cookie (there is no session to derive it from
/// yet): the form must echo it.
const LOGIN_COOKIE: &str = "jobwire_login";
/// How long a session lasts; then the person logs in again.
const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn is_secret_shaped(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

fn same_secret(presented: &str, expected: &str) -> bool {
    !expected.is_empty() && bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}

/// The CSRF token of the forms of the session whose secret is `secret`.
fn csrf_token(secret: &str) -> String {
    let digest = Sha256::digest(format!("jobwire-ui-csrf:{secret}").as_bytes());
    hex::encode(digest)
}

/// A cookie only this server's pages send back, invisible to any script,
/// and sent over HTTPS only when the page was reached over it (behind a
/// TLS proxy: [`came_over_https`]). No Max-Age: the browser drops it when
/// it closes, and the database's expiry bounds it either way.
fn cookie(
    name: &'static str,
    value: String,
    path: &'static str,
    headers: &HeaderMap,
) -> Cookie<'static> {
    Cookie::build((name, value))
        .path(path)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(came_over_https(headers))
        .build()
}

/// The person looking at a page: their token (name and scope) and the CSRF
/// token their forms carry. Taking it as a handler's argument is what makes
/// the page need a login.
pub(crate) struct Viewer {
    pub(crate) token: ApiToken,
    pub(crate) csrf: String,
}

impl FromRequestParts<ApiState> for Viewer {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, UiError> {
        Viewer::of_session(&CookieJar::from_headers(&parts.headers), state).await
    }
}

impl Viewer {
    /// The person whose live session the cookies hold, if any.
    async fn of_session(jar: &CookieJar, state: &ApiState) -> Result<Self, UiError> {
        let secret = jar
            .get(SESSION_COOKIE)
            .map(|cookie| cookie.value())
            .filter(|value| is_secret_shaped(value))
            .ok_or(UiError::LoginRequired)?;
        let token = jobwire_core::find_ui_session(&state.pool, secret)
            .await?
            // The login refuses tokens bound to a tenant; a session of one
            // made some other way is no session either.
            .filter(|token| token.tenant.is_none())
            .ok_or(UiError::LoginRequired)?;
        Ok(Viewer {
            token,
            csrf: csrf_token(secret),
        })
    }

    /// Whether this person's token allows what needs `scope`.
    pub(crate) fn can(&self, scope: Scope) -> bool {
        self.token.scope.allows(scope)
    }

    /// Check a posted form: its CSRF token first (a forged post learns
    /// nothing, not even the scope), then the scope the action needs.
    pub(crate) fn authorize(&self, csrf: &str, scope: Scope) -> Result<(), UiError> {
        if !same_secret(csrf, &self.csrf) {
            return Err(UiError::CsrfRejected);
        }
        self.require(scope)
    }

    /// Refuse a page that offers an action this token may not take.
    pub(crate) fn require(&self, scope: Scope) -> Result<(), UiError> {
        if self.can(scope) {
            return Ok(());
        }
        Err(UiError::Forbidden(format!(
            "You are logged in as {:?} with a {} token; this needs {scope}.",
            self.token.name, self.token.scope
        )))
    }

    /// The hidden field every state-changing form carries.
    pub(crate) fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf); }
    }
}

/// A form with nothing but its CSRF token (a button).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActionForm {
    #[serde(default)]
    pub(crate) csrf: String,
}

/// `GET /ui/login`: the form, with a fresh login CSRF cookie; the overview
/// for someone already logged in.
pub(crate) async fn login_page(
    State(state): State<ApiState>,
    jar: CookieJar,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if Viewer::of_session(&jar, &state).await.is_ok() {
        return Redirect::to("/ui").into_response();
    }
    let notice = (uri.query() == Some("logged-out")).then_some("You are logged out.");
    let value = random_hex();
    let jar = jar.add(cookie(LOGIN_COOKIE, value.clone(), "/ui/login", &headers));
    (jar, login_form(&value, notice, None)).into_response()
}

fn login_form(csrf: &str, notice: Option<&str>, problem: Option<&str>) -> Markup {
    let body = html! {
        section.panel.login {
            @if let Some(notice) = notice { p.notice { (notice) } }
            @if let Some(problem) = problem { p.problem role="alert" { (problem) } }
            form method="post" action="/ui/login" {
                input type="hidden" name="csrf" value=(csrf);
                label for="token" { "API token" }
                input #token type="password" name="token" autocomplete="off" required
                    placeholder="jw_…" spellcheck="false";
                button type="submit" { "Log in" }
            }
            p.muted {
                "Create one with " code { "jobwire token create NAME --scope read" }
                " (read-only), " code { "write" } " (cancel, replay) or "
                code { "admin" } " (retry groups, pause queues and schedules)."
            }
        }
    };
    page("Log in", Section::None, None, body)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/login`: a live token opens a session; anything else is the
/// form again with one message for every kind of wrong token.
pub(crate) async fn log_in(
    State(state): State<ApiState>,
    jar: CookieJar,
    headers: HeaderMap,
    UiForm(form): UiForm<LoginForm>,
) -> Result<Response, UiError> {
    let expected = jar
        .get(LOGIN_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    if !same_secret(&form.csrf, &expected) {
        return Err(UiError::CsrfRejected);
    }
    let refused = || {
        let problem = "That is not a live API token. Check it, or create a new one.";
        (
            StatusCode::UNAUTHORIZED,
            login_form(&expected, None, Some(problem)),
        )
            .into_response()
    };
    let Some(token) = jobwire_core::authenticate_api_token(&state.pool, form.token.trim()).await?
    else {
        return Ok(refused());
    };
    // The dashboard shows every tenant's jobs: a token bound to one tenant
    // may not open it.
    if let Some(tenant) = &token.tenant {
        let problem = format!(
            "This token is bound to tenant {tenant:?}: it can use the API for that tenant's jobs, not the dashboard."
        );
        return Ok((
            StatusCode::FORBIDDEN,
            login_form(&expected, None, Some(&problem)),
        )
            .into_response());
    }
    let Some(session) = jobwire_core::create_ui_session(&state.pool, &token, SESSION_TTL).await?
    else {
        return Ok(refused());
    };
    tracing::info!(actor = %token.name, scope = %token.scope, "dashboard login");
    let jar = jar
        .remove(Cookie::build(LOGIN_COOKIE).path("/ui/login"))
        .add(cookie(SESSION_COOKIE, session.secret, "/ui", &headers));
    Ok((jar, Redirect::to("/ui")).into_response())
}

/// `POST /ui/logout`: the session ends in the database, so its cookie is
/// worthless even where the browser keeps it.
pub(crate) async fn log_out(
    State(state): State<ApiState>,
    jar: CookieJar,
    viewer: Viewer,
    UiForm(form): UiForm<ActionForm>,
) -> Result<Response, UiError> {
    viewer.authorize(&form.csrf, Scope::Read)?;
    if let Some(secret) = jar.get(SESSION_COOKIE).map(|c| c.value().to_owned()) {
        jobwire_core::end_ui_session(&state.pool, &secret).await?;
    }
    tracing::info!(actor = %viewer.token.name, "dashboard logout");
    let jar = jar.remove(Cookie::build(SESSION_COOKIE).path("/ui"));
    Ok((jar, Redirect::to("/ui/login?logged-out")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csrf_token_belongs_to_one_session() {
        let (a, b) = (random_hex(), random_hex());
        assert!(is_secret_shaped(&a) && is_secret_shaped(&b));
        assert_ne!(csrf_token(&a), csrf_token(&b));
        assert!(same_secret(&csrf_token(&a), &csrf_token(&a)));
        assert!(!same_secret(&csrf_token(&b), &csrf_token(&a)));
        assert!(
            !same_secret("", ""),
            "an empty expected token matches nothing"
        );
        assert!(!is_secret_shaped("zz"));
    }
}
