//! The accept loop, with the limits a server facing slow or hostile clients needs: at most
//! `max_connections` at once (one more is closed as soon as it is accepted, before any request
//! is read or any token checked), and `header_timeout` to send a request's headers, which is
//! also how long a kept-alive connection may sit idle between requests. Stops gracefully:
//! requests in flight get `SHUTDOWN_GRACE` to finish, idle connections close.

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tower::ServiceExt;

/// Why a certificate and key cannot serve HTTPS.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error("the HTTPS certificate is not valid PEM: {0}")]
    CertificatePem(#[source] rustls_pki_types::pem::Error),
    #[error("the HTTPS certificate file holds no certificate")]
    NoCertificate,
    #[error("the HTTPS key is not a valid PEM key: {0}")]
    KeyPem(#[source] rustls_pki_types::pem::Error),
    #[error("cannot set up HTTPS: {0}")]
    Setup(#[source] rustls::Error),
    #[error("the HTTPS certificate and key do not go together: {0}")]
    Mismatch(#[source] rustls::Error),
}

/// The certificate and key the server speaks HTTPS with: the cluster's own (`--tls-*`).
#[derive(Clone)]
pub struct HttpsIdentity {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for HttpsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpsIdentity")
    }
}

impl HttpsIdentity {
    /// From PEM bytes: a certificate chain and its private key. `Err` names what is wrong.
    pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Self, HttpsError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().map_err(HttpsError::CertificatePem)?;
        if chain.is_empty() {
            return Err(HttpsError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(HttpsError::KeyPem)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(HttpsError::Setup)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(HttpsError::Mismatch)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(HttpsIdentity { config: Arc::new(config) })
    }
}

/// How many connections and how much time a client gets.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Connections open at once; past it a new one is closed at once.
    pub max_connections: usize,
    /// Time to send a request's headers, and the most a kept-alive connection waits for its next request.
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 512 connections (half the usual 1,024 open files, so the head keeps descriptors for its own
    /// work), 10 s for headers.
    fn default() -> Self {
        ConnectionLimits { max_connections: 512, header_timeout: Duration::from_secs(10) }
    }
}

/// What a server speaks: HTTP/1.1, or HTTP/2 only (gRPC; cleartext with prior knowledge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http1,
    Http2,
}

/// Serves `app` on `listener` until `stop` fires (or is dropped).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    https: Option<HttpsIdentity>,
    stop: oneshot::Receiver<()>,
    protocol: Protocol,
) {
    let tls = https.map(|identity| tokio_rustls::TlsAcceptor::from(identity.config));
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    match protocol {
        Protocol::Http1 => {
            builder = builder.http1_only();
            builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
        }
        Protocol::Http2 => {
            builder = builder.http2_only();
            // A client silent past the header timeout is pinged; one that never answers is dropped.
            builder
                .http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(limits.header_timeout))
                .keep_alive_timeout(limits.header_timeout);
        }
    }
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was taken: not fatal.
                    tracing::warn!("the HTTP server could not accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            drop(stream); // over the cap: closed before anything is read
            continue;
        };
        let _ = stream.set_nodelay(true);
        // The peer rides on each request (Serve's proxy hands it to the replica as the ASGI client).
        let service =
            TowerToHyperService::new(app.clone().map_request(move |mut request: axum::extract::Request<_>| {
                request.extensions_mut().insert(crate::serve_proxy::PeerAddr(peer));
                request
            }));
        let Some(acceptor) = &tls else {
            let connection =
                graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned());
            tokio::spawn(async move {
                let _ = connection.await;
                drop(permit);
            });
            continue;
        };
        // The handshake counts against the header timeout: a client that never finishes it holds
        // its place no longer than one that never sends its headers.
        let (acceptor, builder, watcher) = (acceptor.clone(), builder.clone(), graceful.watcher());
        let timeout = limits.header_timeout;
        tokio::spawn(async move {
            let Ok(Ok(stream)) = tokio::time::timeout(timeout, acceptor.accept(stream)).await else {
                return; // a failed or slow handshake: dropped, its place with it
            };
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
            let _ = watcher.watch(connection).await;
            drop(permit);
        });
    }
    drop(listener);
    // Requests in flight get a while to finish; a client holding a connection open does not hold
    // the head's shutdown (its connection still ends at its own timeout).
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::debug!("HTTP connections still open after {SHUTDOWN_GRACE:?}: not waited for");
    }
}

/// How long a stopping server waits for the requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
