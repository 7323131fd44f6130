//! The head's HTTP server (axum on the head's tokio runtime), on
//! `--dashboard-host:--dashboard-port` (127.0.0.1:8265 by default): Ray's REST
//! routes behind the cluster token. It serves `/api/version`, the health and
//! authentication routes; the Jobs API and the dashboard join [`router`].

mod auth;
mod routes;

pub use auth::constant_time_eq;

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
}

/// The whole application: every route, behind the token check.
pub fn router(config: HttpConfig) -> Router {
    let config = Arc::new(config);
    routes::routes(config.clone()).layer(axum::middleware::from_fn_with_state(config, auth::require_token))
}

/// A running server; dropping it stops it (without waiting).
pub struct HttpServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Serves [`router`] on `listener` until [`HttpServer::shutdown`].
    pub fn start(listener: TcpListener, config: HttpConfig) -> std::io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(config);
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!("the HTTP server on {local_addr} stopped: {e}");
            }
        });
        Ok(Self { local_addr, stop: Some(stop), task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets requests in flight finish, and waits for it.
    pub async fn shutdown(mut self) {
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
