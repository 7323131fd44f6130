//! The operator's calls to a cluster's head over its HTTP API, with the
//! cluster token: the pending demand and nodes' use (`/api/cluster_status`),
//! the Jobs API (`/api/jobs/`) for `OxrayJob`, and Serve's REST API
//! (`/api/serve/applications/`) for `OxrayService`. Plain HTTP inside the
//! cluster network, or HTTPS verified against the cluster's CA when the head
//! has a certificate (`spec.tls`); every call has a deadline. Replies are read as the types
//! the head writes them from (`oxray_rest`'s `ClusterStatusReply` and
//! `JobDetails`); a call that fails is a [`HeadApiError`].

use crate::autoscale::{Demand, NodeUsage};
use crate::crd::{ServeAppStatus, ServeDeploymentStatus};
use crate::error::{CaError, HeadApiError};
use crate::resources::ResourceMap;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use oxray_rest::{ClusterStatusReply, JobDetails, JobStatus, LoadMetricsReport};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long one call to a head may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A job as the Jobs API reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobState {
    pub status: JobStatus,
    pub message: String,
}

/// A head's answer: its status and body.
struct Answer {
    method: Method,
    url: String,
    status: StatusCode,
    body: Bytes,
}

impl Answer {
    /// The body as text, for a message.
    fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        if text.trim().is_empty() { "(no body)".to_string() } else { text.trim().to_string() }
    }

    /// An error unless the status is a success.
    fn success(self) -> Result<Self, HeadApiError> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(HeadApiError::ErrorStatus {
                status: self.status,
                body: self.text(),
                method: self.method,
                url: self.url,
            })
        }
    }

    /// The body read as `T` (described as `expected` in the error).
    fn parse<T: DeserializeOwned>(self, expected: &'static str) -> Result<T, HeadApiError> {
        serde_json::from_slice(&self.body).map_err(|error| HeadApiError::BadReply {
            method: self.method,
            url: self.url,
            expected,
            error,
        })
    }
}

/// One cluster's head as the operator reaches it.
#[derive(Clone, Debug)]
pub struct Head {
    /// `http://host:port`, or `https://host:port` for a head with a certificate.
    pub base: String,
    /// The cluster token, sent as a bearer token.
    pub token: String,
    /// For HTTPS: the CA (PEM) the head's certificate must be signed by; no other is trusted.
    pub ca: Option<Arc<TrustedCa>>,
}

/// A CA certificate, checked, ready to verify a head with.
#[derive(Debug)]
pub struct TrustedCa {
    pem: Vec<u8>,
    roots: Arc<rustls::RootCertStore>,
}

impl TrustedCa {
    /// The CA in `pem`, from `key` of Secret `secret` (named in the error).
    pub fn from_pem(pem: &[u8], secret: &str, key: &str) -> Result<Self, CaError> {
        let unusable = |reason: String| CaError::Unusable { secret: secret.to_string(), key: key.to_string(), reason };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| unusable(format!("not PEM: {e}")))?;
        if certs.is_empty() {
            return Err(unusable("no certificate in it".to_string()));
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| unusable(e.to_string()))?;
        }
        Ok(TrustedCa { pem: pem.to_vec(), roots: Arc::new(roots) })
    }
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Talks to heads.
#[derive(Clone)]
pub struct HeadClient {
    http: Client<HttpConnector, Full<Bytes>>,
    /// One HTTPS client per CA (connections are pooled per client).
    https: Arc<Mutex<HashMap<Vec<u8>, HttpsClient>>>,
}

impl Default for HeadClient {
    fn default() -> Self {
        Self::new()
    }
}

/// More CAs than this and the cache starts again (CAs are per cluster, and rotate).
const MAX_CACHED_CAS: usize = 64;

impl HeadClient {
    pub fn new() -> Self {
        Self { http: Client::builder(TokioExecutor::new()).build_http(), https: Arc::default() }
    }

    /// The client that trusts exactly `ca`.
    fn https_client(&self, ca: &TrustedCa) -> HttpsClient {
        let mut cache = self.https.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(client) = cache.get(&ca.pem) {
            return client.clone();
        }
        if cache.len() >= MAX_CACHED_CAS {
            cache.clear();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(ca.roots.clone())
            .with_no_client_auth();
        let connector =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_only().enable_http1().build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        cache.insert(ca.pem.clone(), client.clone());
        client
    }

    async fn call(
        &self,
        method: Method,
        head: &Head,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, HeadApiError> {
        let url = format!("{}{path}", head.base);
        let url = url.as_str();
        let payload = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = Request::builder()
            .method(method.clone())
            .uri(url)
            .header("authorization", format!("Bearer {}", head.token))
            .header("content-type", "application/json")
            .body(Full::new(payload))
            .map_err(|e| HeadApiError::unreachable(&method, url, &e))?;
        let (status, body) = tokio::time::timeout(CALL_TIMEOUT, async {
            let sent = match &head.ca {
                Some(ca) => self.https_client(ca).request(request).await,
                None => self.http.request(request).await,
            };
            let response = sent.map_err(|e| HeadApiError::unreachable(&method, url, &e))?;
            let status = response.status();
            let body = response.into_body().collect().await.map_err(|e| HeadApiError::unreachable(&method, url, &e))?;
            Ok((status, body.to_bytes()))
        })
        .await
        .map_err(|_| HeadApiError::NoAnswer {
            method: method.clone(),
            url: url.to_string(),
            deadline: CALL_TIMEOUT,
        })??;
        Ok(Answer { method, url: url.to_string(), status, body })
    }

    /// The head's pending demand and its nodes (`GET /api/cluster_status`).
    pub async fn demand(&self, head: &Head) -> Result<Demand, HeadApiError> {
        read_demand(self.call(Method::GET, head, "/api/cluster_status", None).await?)
    }

    /// Submits a job (`POST /api/jobs/`); `Ok(false)` when one with this id exists already.
    pub async fn submit_job(&self, head: &Head, job: &Value) -> Result<bool, HeadApiError> {
        let answer = self.call(Method::POST, head, "/api/jobs/", Some(job)).await?;
        if answer.status == StatusCode::BAD_REQUEST && answer.text().contains("already exists") {
            return Ok(false);
        }
        answer.success().map(|_| true)
    }

    /// A job's state (`GET /api/jobs/{id}`); `None` when the head does not know it.
    pub async fn job(&self, head: &Head, id: &str) -> Result<Option<JobState>, HeadApiError> {
        let answer = self.call(Method::GET, head, &format!("/api/jobs/{id}"), None).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let details: JobDetails = answer.success()?.parse("a job's details")?;
        Ok(Some(JobState { status: details.status, message: details.message }))
    }

    /// Asks the head to stop a job (`POST /api/jobs/{id}/stop`).
    pub async fn stop_job(&self, head: &Head, id: &str) -> Result<(), HeadApiError> {
        let answer = self.call(Method::POST, head, &format!("/api/jobs/{id}/stop"), Some(&json!({}))).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        answer.success().map(|_| ())
    }

    /// Deploys a Serve config (`PUT /api/serve/applications/`, Ray's `ServeDeploySchema` as JSON);
    /// a config the head refuses is an `ErrorStatus` carrying its 400's text.
    pub async fn put_serve_config(&self, head: &Head, config: &Value) -> Result<(), HeadApiError> {
        self.call(Method::PUT, head, "/api/serve/applications/", Some(config)).await?.success().map(|_| ())
    }

    /// Serve's applications as the head reports them (`GET /api/serve/applications/`): each
    /// one's status and message and its deployments'; empty while Serve does not run.
    pub async fn serve_applications(&self, head: &Head) -> Result<BTreeMap<String, ServeAppStatus>, HeadApiError> {
        read_serve_applications(self.call(Method::GET, head, "/api/serve/applications/", None).await?)
    }
}

/// Ray's `ServeInstanceDetails` as statuses per application and deployment.
fn read_serve_applications(answer: Answer) -> Result<BTreeMap<String, ServeAppStatus>, HeadApiError> {
    #[derive(serde::Deserialize)]
    struct Details {
        #[serde(default)]
        applications: BTreeMap<String, App>,
    }
    #[derive(serde::Deserialize)]
    struct App {
        status: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        deployments: BTreeMap<String, Deployment>,
    }
    #[derive(serde::Deserialize)]
    struct Deployment {
        status: String,
        #[serde(default)]
        message: String,
    }
    let details: Details = answer.success()?.parse("Serve's details with applications and their deployments")?;
    Ok(details
        .applications
        .into_iter()
        .map(|(name, app)| {
            let deployments = app
                .deployments
                .into_iter()
                .map(|(d, dep)| (d, ServeDeploymentStatus { status: dep.status, message: dep.message }))
                .collect();
            (name, ServeAppStatus { status: app.status, message: app.message, serve_deployment_statuses: deployments })
        })
        .collect())
}

/// `/api/cluster_status`'s answer as the autoscaler's demand.
fn read_demand(answer: Answer) -> Result<Demand, HeadApiError> {
    let reply: ClusterStatusReply =
        answer.success()?.parse("a cluster status with data.clusterStatus.loadMetricsReport")?;
    Ok(Demand::from(reply.data.cluster_status.load_metrics_report))
}

/// The report's `resourceDemand` as requests; its `pgDemand` (placement
/// groups waiting to be placed) as one request of the bundles' sum for
/// STRICT_PACK, a spread group for STRICT_SPREAD, else a request per bundle;
/// and its `nodes`.
impl From<LoadMetricsReport> for Demand {
    fn from(report: LoadMetricsReport) -> Self {
        let mut requests: Vec<(ResourceMap, u32)> = report
            .resource_demand
            .into_iter()
            .map(|(shape, count)| (shape, u32::try_from(count).unwrap_or(u32::MAX)))
            .collect();
        let mut spread_groups = Vec::new();
        for group in report.pg_demand {
            match group.strategy.as_str() {
                // Every bundle on one node: one request of their sum.
                "STRICT_PACK" => {
                    let mut sum = ResourceMap::new();
                    for (k, v) in group.bundles.iter().flatten() {
                        *sum.entry(k.clone()).or_default() += v;
                    }
                    requests.push((sum, 1));
                }
                "STRICT_SPREAD" => spread_groups.push(group.bundles),
                _ => requests.extend(group.bundles.into_iter().map(|b| (b, 1))),
            }
        }
        let nodes = report
            .nodes
            .into_iter()
            .map(|node| NodeUsage {
                ip: node.node_ip,
                total: node.resources_total,
                available: node.resources_available,
                idle_ms: node.idle_duration_ms,
            })
            .collect();
        Demand { requests, spread_groups, nodes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` as the head's answer to `GET /api/cluster_status`.
    fn demand_of(body: &Value) -> Result<Demand, HeadApiError> {
        read_demand(Answer {
            method: Method::GET,
            url: "http://head:8265/api/cluster_status".to_string(),
            status: StatusCode::OK,
            body: Bytes::from(body.to_string()),
        })
    }

    #[test]
    fn the_heads_report_becomes_demand() {
        let body = json!({"result": true, "data": {"clusterStatus": {"loadMetricsReport": {
            "resourceDemand": [[{"CPU": 2.0}, 3]],
            "pgDemand": [
                {"strategy": "STRICT_PACK", "bundles": [{"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]},
                {"strategy": "SPREAD", "bundles": [{"CPU": 1.0}, {"CPU": 1.0}]},
                {"strategy": "STRICT_SPREAD", "bundles": [{"CPU": 2.0}, {"CPU": 2.0}]}
            ],
            "nodes": [{"nodeIp": "10.0.0.2", "resourcesTotal": {"CPU": 2.0}, "resourcesAvailable": {"CPU": 2.0}, "idleDurationMs": 5000}]
        }}}});
        let demand = demand_of(&body).unwrap();
        let cpu = |n: f64| ResourceMap::from([("CPU".to_string(), n)]);
        let strict = ResourceMap::from([("CPU".to_string(), 2.0), ("GPU".to_string(), 1.0)]);
        assert_eq!(demand.requests, vec![(cpu(2.0), 3), (strict, 1), (cpu(1.0), 1), (cpu(1.0), 1)]);
        assert_eq!(demand.spread_groups, vec![vec![cpu(2.0), cpu(2.0)]]);
        assert_eq!(demand.nodes[0].idle_ms, 5000);
        assert!(demand_of(&json!({"result": true})).unwrap_err().to_string().contains("loadMetricsReport"));
    }

    #[test]
    fn serves_details_become_statuses_per_application_and_deployment() {
        let answer = |status: StatusCode, body: &Value| Answer {
            method: Method::GET,
            url: "http://head:8265/api/serve/applications/".to_string(),
            status,
            body: Bytes::from(body.to_string()),
        };
        let details = json!({"controller_info": {}, "applications": {"shop": {
            "name": "shop", "status": "DEPLOY_FAILED", "message": "import failed", "route_prefix": "/shop",
            "deployments": {"Version": {"name": "Version", "status": "UNHEALTHY", "message": "crashed", "replicas": []}}
        }}});
        let apps = read_serve_applications(answer(StatusCode::OK, &details)).unwrap();
        assert_eq!((apps["shop"].status.as_str(), apps["shop"].message.as_str()), ("DEPLOY_FAILED", "import failed"));
        let version = &apps["shop"].serve_deployment_statuses["Version"];
        assert_eq!((version.status.as_str(), version.message.as_str()), ("UNHEALTHY", "crashed"));
        let not_running = json!({"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": null});
        assert!(read_serve_applications(answer(StatusCode::OK, &not_running)).unwrap().is_empty());
        let refused = read_serve_applications(answer(StatusCode::UNAUTHORIZED, &json!("no token"))).unwrap_err();
        assert!(refused.to_string().contains("401"), "{refused}");
    }

    #[test]
    fn a_ca_that_is_not_a_certificate_is_refused_by_name() {
        let error = TrustedCa::from_pem(b"not a certificate", "ca", "ca.crt").unwrap_err();
        assert!(error.to_string().contains("Secret ca key \"ca.crt\" is not a usable CA certificate"), "{error}");
        let junk = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(TrustedCa::from_pem(junk, "ca", "ca.crt"), Err(CaError::Unusable { .. })));
    }
}
