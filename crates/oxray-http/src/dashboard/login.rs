//! Logging in: the login form at `/` (or straight to the overview for a
//! browser that has a live session), a `/?token=` link that starts a session and
//! at once sends the browser on to a URL without the token, and the form again
//! instead of a bare 401/403 when a browser is refused a page.

use super::Dashboard;
use super::render::{html, ok};
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

pub(super) fn routes() -> Router<Dashboard> {
    Router::new().route("/", get(index))
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    /// Why the last try failed; empty for a first visit.
    message: String,
}

#[derive(serde::Deserialize)]
struct LoginQuery {
    token: Option<String>,
}

/// The login page, or the overview for a browser with a live session; a `?token=`
/// link checks the token, starts a session and redirects (the token leaves the
/// address bar and the history at once).
async fn index(State(dash): State<Dashboard>, Query(login): Query<LoginQuery>, headers: HeaderMap) -> Response {
    if let Some(token) = login.token {
        if !dash.guard.token_matches(&token) {
            let page = LoginPage { message: "That link's token is not this cluster's.".into() };
            return html(StatusCode::FORBIDDEN, &page);
        }
        let cookie = dash.guard.sessions.cookie(&dash.guard.sessions.start());
        return ([(header::SET_COOKIE, cookie)], Redirect::to("/overview")).into_response();
    }
    if dash.guard.check(&headers).is_ok() {
        return Redirect::to("/overview").into_response();
    }
    ok(&LoginPage { message: String::new() })
}

/// What a browser gets instead of a bare 401/403 on a page: the login form.
pub(crate) fn login_instead(status: StatusCode) -> Response {
    let message =
        if status == StatusCode::FORBIDDEN { "The token this browser sent is not this cluster's." } else { "" };
    html(status, &LoginPage { message: message.into() })
}
