//! The operator's calls to a cluster's head over its HTTP API, with the
//! cluster token: the pending demand and nodes' use (`/api/cluster_status`),
//! and the Jobs API (`/api/jobs/`) for `OxrayJob`. Plain HTTP inside the
//! cluster network; every call has a deadline. Replies are read as the types
//! the head writes them from (`oxray_rest`'s `ClusterStatusReply` and
//! `JobDetails`); a call that fails is a [`HeadApiError`].

use crate::autoscale::{Demand, NodeUsage};
use crate::error::HeadApiError;
use crate::resources::ResourceMap;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use oxray_rest::{ClusterStatusReply, JobDetails, JobStatus, LoadMetricsReport};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
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

/// Talks to heads.
#[derive(Clone)]
pub struct HeadClient {
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HeadClient {
    fn default() -> Self {
        Self::new()
    }
}

impl HeadClient {
    pub fn new() -> Self {
        Self { http: Client::builder(TokioExecutor::new()).build_http() }
    }

    async fn call(&self, method: Method, url: &str, token: &str, body: Option<&Value>) -> Result<Answer, HeadApiError> {
        let payload = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = Request::builder()
            .method(method.clone())
            .uri(url)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Full::new(payload))
            .map_err(|e| HeadApiError::unreachable(&method, url, &e))?;
        let (status, body) = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = self.http.request(request).await.map_err(|e| HeadApiError::unreachable(&method, url, &e))?;
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
    pub async fn demand(&self, base: &str, token: &str) -> Result<Demand, HeadApiError> {
        let url = format!("{base}/api/cluster_status");
        read_demand(self.call(Method::GET, &url, token, None).await?)
    }

    /// Submits a job (`POST /api/jobs/`); `Ok(false)` when one with this id exists already.
    pub async fn submit_job(&self, base: &str, token: &str, job: &Value) -> Result<bool, HeadApiError> {
        let url = format!("{base}/api/jobs/");
        let answer = self.call(Method::POST, &url, token, Some(job)).await?;
        if answer.status == StatusCode::BAD_REQUEST && answer.text().contains("already exists") {
            return Ok(false);
        }
        answer.success().map(|_| true)
    }

    /// A job's state (`GET /api/jobs/{id}`); `None` when the head does not know it.
    pub async fn job(&self, base: &str, token: &str, id: &str) -> Result<Option<JobState>, HeadApiError> {
        let url = format!("{base}/api/jobs/{id}");
        let answer = self.call(Method::GET, &url, token, None).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let details: JobDetails = answer.success()?.parse("a job's details")?;
        Ok(Some(JobState { status: details.status, message: details.message }))
    }

    /// Asks the head to stop a job (`POST /api/jobs/{id}/stop`).
    pub async fn stop_job(&self, base: &str, token: &str, id: &str) -> Result<(), HeadApiError> {
        let url = format!("{base}/api/jobs/{id}/stop");
        let answer = self.call(Method::POST, &url, token, Some(&json!({}))).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        answer.success().map(|_| ())
    }
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
}
