//! The head's HTTP server (axum on the head's tokio runtime), on
//! `--dashboard-host:--dashboard-port` (127.0.0.1:8265 by default): Ray's REST
//! routes behind the cluster token: `/api/version`, health and authentication
//! (`routes.rs`), the Jobs API over `oxray-jobs`' manager (`jobs.rs`), the State API (`state/`) and the
//! dashboard's pages (`dashboard/`). Serve's HTTP proxy (`serve_proxy/`), which every node agent
//! runs, shares its accept loop.

mod auth;
mod dashboard;
mod error;
mod headers;
mod jobs;
mod metrics;
mod routes;
mod serve;
pub mod serve_api;
pub mod serve_proxy;
mod sessions;
mod state;

pub use auth::token_matches;
pub use error::HttpError;
pub use metrics::{GpuSample, MetricsServer, NodeMetricsSource, NodeSample, NodeSeries};
pub use oxray_jobs::BoxFuture;
pub use serve::{ConnectionLimits, HttpsError, HttpsIdentity};
pub use state::rows::{
    ActorRow, ClusterState, LogChunk, LogFileRow, LogSearch, NodeQueryError, NodeRow, PlacementGroupRow, Profile,
    TaskListing, TaskRow,
};

use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What the routes need to know about the cluster.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The cluster token every non-public route requires.
    pub token: String,
    /// The head's session name (`session_<date>_<pid>`), as `/api/version` reports it.
    pub session_name: String,
    /// Serve the Jobs API, keeping its jobs as this says.
    pub jobs: Option<oxray_jobs::JobsConfig>,
    /// The head's tables and node agents, for the State API.
    pub cluster: Option<Arc<dyn ClusterState>>,
    /// How far back the head keeps each node's samples (what the Metrics page can show).
    pub metrics_window_ms: u64,
    /// How many connections and how much time a client gets.
    pub limits: ConnectionLimits,
    /// Speak HTTPS with this identity (the cluster's `--tls-*` certificate); plain HTTP when None.
    pub https: Option<HttpsIdentity>,
}

/// The whole application for a server on `port`: every route, behind the token check.
/// Fails when the job store cannot be opened.
pub fn router(config: HttpConfig, port: u16) -> Result<Router, HttpError> {
    build(config, port).map(|(app, _)| app)
}

/// The application and what its routes read (the server stops the job manager on shutdown).
fn build(config: HttpConfig, port: u16) -> Result<(Router, state::StateSources), HttpError> {
    let config = Arc::new(config);
    // Over HTTPS the session cookie is `Secure`: a browser never sends it over plain HTTP.
    let secure = config.https.is_some();
    let guard = Arc::new(auth::Guard::new(config.token.clone(), sessions::Sessions::new(port, secure)));
    let mut app = routes::routes(config.clone(), guard.clone());
    let manager = config.jobs.clone().map(oxray_jobs::JobManager::open).transpose()?;
    if let Some(manager) = &manager {
        app = app.merge(jobs::routes(manager.clone()));
    }
    let sources = state::StateSources { cluster: config.cluster.clone(), jobs: manager.clone() };
    app = app.merge(state::routes(sources.clone())).merge(serve_api::routes(sources.clone()));
    app = app.merge(metrics::routes(sources.clone())).merge(dashboard::routes(config, guard.clone(), sources.clone()));
    let app = app
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(guard, auth::require_token))
        .layer(axum::middleware::from_fn(headers::add_security_headers));
    Ok((app, sources))
}

/// A running server; dropping it stops it (without waiting).
pub struct HttpServer {
    local_addr: SocketAddr,
    sources: state::StateSources,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Serves [`router`] on `listener` until [`HttpServer::shutdown`].
    pub fn start(listener: TcpListener, config: HttpConfig) -> Result<Self, HttpError> {
        let local_addr = listener.local_addr().map_err(|source| HttpError::Listener { server: "HTTP", source })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (limits, https) = (config.limits, config.https.clone());
        let (app, sources) = build(config, local_addr.port())?;
        let task = tokio::spawn(serve::serve(listener, app, limits, https, stopped, serve::Protocol::Http1));
        Ok(Self { local_addr, sources, stop: Some(stop), task })
    }

    /// Takes Serve back if the head kept a checkpoint of it (it ran when the head went down): called
    /// once the head's node serves, since the recovery job joins the cluster through it.
    pub fn recover_serve(&self) {
        serve_api::recover_on_start(&self.sources);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops the running jobs (the head is going away; see `JobManager::stop_all`),
    /// stops accepting, lets requests in flight finish, and waits for it.
    pub async fn shutdown(mut self) {
        if let Some(jobs) = self.sources.jobs.take() {
            jobs.stop_all().await;
        }
        self.signal_stop();
        let _ = (&mut self.task).await;
    }

    fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.signal_stop();
    }
}
