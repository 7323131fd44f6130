//! Logging in: the login form at `/` (or straight to the overview for a
//! browser that has the cookie), a `/?token=` link that sets the cookie, and
//! the form again instead of a bare 401/403 when a browser is refused a page.

use super::Dashboard;
use super::render::{html, ok};
use crate::auth;
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

/// The login page, or the overview for a browser that has the cookie; a
/// `?token=` link checks the token and sets the cookie.
async fn index(State(dash): State<Dashboard>, Query(login): Query<LoginQuery>, headers: HeaderMap) -> Response {
    if let Some(token) = login.token {
        if !auth::token_matches(&token, &dash.config.token) {
            let page = LoginPage { message: "That link's token is not this cluster's.".into() };
            return html(StatusCode::FORBIDDEN, &page);
        }
        let cookie = auth::session_cookie(&dash.config.token);
        return ([(header::SET_COOKIE, cookie)], Redirect::to("/overview")).into_response();
    }
    if auth::check(&dash.config, &headers).is_ok() {
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
