//! The dashboard: server-rendered pages (askama templates in `templates/`)
//! over the same rows the State API serves, with every asset embedded
//! (`assets.rs`). Each page is a module of its own (its handlers, what it
//! shows and its template's structs); a page's refreshing part is a block of
//! its template, which the same handler renders alone for htmx (an
//! `HX-Request`, or the page's `/ui/...` route; `render.rs`). A browser logs
//! in once (`login.rs`): the token through the login form
//! (`POST /api/authenticate`) or a `/?token=` link starts a session (`sessions.rs`)
//! whose HttpOnly SameSite=Strict cookie carries its id, never the token.

mod actors;
mod assets;
mod charts;
mod datasets;
mod jobs;
mod login;
mod logs;
mod overview;
mod profile;
mod render;
mod serve;
mod tasks;
mod train;
mod tune;

pub(crate) use login::login_instead;
pub(crate) use tune::trials_by_status;

use crate::HttpConfig;
use crate::auth::Guard;
use crate::state::StateSources;
use axum::Router;
use axum::routing::get;
use std::sync::Arc;

/// What every dashboard handler reads: the server's settings and the rows' sources.
#[derive(Clone)]
pub(crate) struct Dashboard {
    config: Arc<HttpConfig>,
    guard: Arc<Guard>,
    sources: StateSources,
}

/// Every page, its fragments and its APIs, and the static files.
pub(crate) fn routes(config: Arc<HttpConfig>, guard: Arc<Guard>, sources: StateSources) -> Router {
    Router::new()
        .route("/static/{*path}", get(assets::serve))
        .route("/favicon.ico", get(assets::favicon))
        .merge(login::routes())
        .merge(overview::routes())
        .merge(jobs::routes())
        .merge(actors::routes())
        .merge(tasks::routes())
        .merge(charts::routes())
        .merge(train::routes())
        .merge(tune::routes())
        .merge(serve::routes())
        .merge(logs::routes())
        .merge(profile::routes())
        .merge(datasets::routes())
        .with_state(Dashboard { config, guard, sources })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn dashboard() -> Router {
        let config = HttpConfig {
            token: "0123456789abcdef".into(),
            session_name: "session_test".into(),
            jobs: None,
            cluster: None,
            metrics_window_ms: 60_000,
            limits: crate::ConnectionLimits::default(),
            https: None,
        };
        let guard = Guard::new(config.token.clone(), crate::sessions::Sessions::new(8265, false));
        routes(Arc::new(config), Arc::new(guard), StateSources { cluster: None, jobs: None })
    }

    async fn get(app: &Router, path: &str, htmx: bool) -> String {
        let mut request = Request::get(path);
        if htmx {
            request = request.header("HX-Request", "true");
        }
        let reply = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        assert!(reply.status().is_success(), "{path}: {}", reply.status());
        String::from_utf8(reply.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_page_asked_by_htmx_is_its_fragment_and_the_page_holds_the_fragment() {
        let app = dashboard();
        for (page, fragment) in [
            ("/overview", "/ui/overview"),
            ("/jobs", "/ui/jobs"),
            ("/actors?q=x", "/ui/actors?q=x"),
            ("/tasks", "/ui/tasks"),
            ("/train", "/ui/train"),
            ("/tune", "/ui/tune"),
            ("/serve", "/ui/serve"),
            ("/datasets", "/ui/datasets"),
        ] {
            let whole = get(&app, page, false).await;
            let part = get(&app, fragment, false).await;
            assert!(whole.starts_with("<!doctype html>") && !part.contains("<html"), "{page}");
            assert!(whole.contains(&part), "{page} holds {fragment}");
            assert_eq!(get(&app, page, true).await, part, "{page} asked by htmx");
            assert_eq!(get(&app, fragment, true).await, part, "{fragment} asked by htmx");
        }
    }
}
