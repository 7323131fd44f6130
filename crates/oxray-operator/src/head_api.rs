//! The operator's calls to a cluster's head over its HTTP API, with the
//! cluster token: the pending demand and nodes' use (`/api/cluster_status`),
//! and the Jobs API (`/api/jobs/`) for `OxrayJob`. Plain HTTP inside the
//! cluster network; every call has a deadline.

use crate::autoscale::{Demand, NodeUsage};
use crate::resources::ResourceMap;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use std::time::Duration;

/// How long one call to a head may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A job as the Jobs API reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobState {
    pub status: String,
    pub message: Option<String>,
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

    async fn call(
        &self,
        method: Method,
        url: &str,
        token: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), String> {
        let payload = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = Request::builder()
            .method(method.clone())
            .uri(url)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Full::new(payload))
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let response = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = self.http.request(request).await.map_err(|e| format!("{method} {url}: {e}"))?;
            let status = response.status();
            let bytes = response.into_body().collect().await.map_err(|e| format!("{method} {url}: {e}"))?.to_bytes();
            Ok::<_, String>((status, bytes))
        })
        .await
        .map_err(|_| format!("{method} {url}: no answer in {} s", CALL_TIMEOUT.as_secs()))??;
        let (status, bytes) = response;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok((status, value))
    }

    /// The head's pending demand and its nodes (`GET /api/cluster_status`).
    pub async fn demand(&self, base: &str, token: &str) -> Result<Demand, String> {
        let url = format!("{base}/api/cluster_status");
        let (status, body) = self.call(Method::GET, &url, token, None).await?;
        if !status.is_success() {
            return Err(format!("GET {url} answered {status}: {body}"));
        }
        parse_demand(&body).map_err(|e| format!("GET {url}: {e}"))
    }

    /// Submits a job (`POST /api/jobs/`); `Ok(false)` when one with this id exists already.
    pub async fn submit_job(&self, base: &str, token: &str, job: &Value) -> Result<bool, String> {
        let url = format!("{base}/api/jobs/");
        let (status, body) = self.call(Method::POST, &url, token, Some(job)).await?;
        if status.is_success() {
            return Ok(true);
        }
        let text = body.as_str().map(str::to_string).unwrap_or_else(|| body.to_string());
        if status == StatusCode::BAD_REQUEST && text.contains("already exists") {
            return Ok(false);
        }
        Err(format!("POST {url} answered {status}: {text}"))
    }

    /// A job's state (`GET /api/jobs/{id}`); `None` when the head does not know it.
    pub async fn job(&self, base: &str, token: &str, id: &str) -> Result<Option<JobState>, String> {
        let url = format!("{base}/api/jobs/{id}");
        let (status, body) = self.call(Method::GET, &url, token, None).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(format!("GET {url} answered {status}: {body}"));
        }
        let state = body["status"].as_str().ok_or_else(|| format!("GET {url}: no status in {body}"))?;
        Ok(Some(JobState { status: state.to_string(), message: body["message"].as_str().map(str::to_string) }))
    }

    /// Asks the head to stop a job (`POST /api/jobs/{id}/stop`).
    pub async fn stop_job(&self, base: &str, token: &str, id: &str) -> Result<(), String> {
        let url = format!("{base}/api/jobs/{id}/stop");
        let (status, body) = self.call(Method::POST, &url, token, Some(&json!({}))).await?;
        if status.is_success() || status == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(format!("POST {url} answered {status}: {body}"))
        }
    }
}

/// Reads `/api/cluster_status`'s `loadMetricsReport`: `resourceDemand` as
/// `[[{shape}, count], ...]`, `pgDemand` as placement groups waiting to be
/// placed (`{"strategy", "bundles": [{shape}...]}`), and `nodes`.
pub fn parse_demand(body: &Value) -> Result<Demand, String> {
    let report = &body["data"]["clusterStatus"]["loadMetricsReport"];
    if !report.is_object() {
        return Err(format!("expected data.clusterStatus.loadMetricsReport, got {body}"));
    }
    let shape = |v: &Value| -> Result<ResourceMap, String> {
        serde_json::from_value(v.clone()).map_err(|e| format!("a demand shape {v} is not resource amounts: {e}"))
    };
    let mut requests = Vec::new();
    let mut spread_groups = Vec::new();
    for entry in report["resourceDemand"].as_array().into_iter().flatten() {
        let count = entry[1].as_u64().ok_or_else(|| format!("a resourceDemand entry {entry} has no count"))?;
        requests.push((shape(&entry[0])?, u32::try_from(count).unwrap_or(u32::MAX)));
    }
    for group in report["pgDemand"].as_array().into_iter().flatten() {
        let bundles: Vec<ResourceMap> =
            group["bundles"].as_array().into_iter().flatten().map(shape).collect::<Result<_, _>>()?;
        if group["strategy"].as_str() == Some("STRICT_PACK") {
            // Every bundle on one node: one request of their sum.
            let mut sum = ResourceMap::new();
            for b in &bundles {
                for (k, v) in b {
                    *sum.entry(k.clone()).or_default() += v;
                }
            }
            requests.push((sum, 1));
        } else if group["strategy"].as_str() == Some("STRICT_SPREAD") {
            spread_groups.push(bundles);
        } else {
            requests.extend(bundles.into_iter().map(|b| (b, 1)));
        }
    }
    let mut nodes = Vec::new();
    for node in report["nodes"].as_array().into_iter().flatten() {
        nodes.push(NodeUsage {
            ip: node["nodeIp"].as_str().unwrap_or_default().to_string(),
            total: shape(&node["resourcesTotal"])?,
            available: shape(&node["resourcesAvailable"])?,
            idle_ms: node["idleDurationMs"].as_u64().unwrap_or(0),
        });
    }
    Ok(Demand { requests, spread_groups, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let demand = parse_demand(&body).unwrap();
        let cpu = |n: f64| ResourceMap::from([("CPU".to_string(), n)]);
        let strict = ResourceMap::from([("CPU".to_string(), 2.0), ("GPU".to_string(), 1.0)]);
        assert_eq!(demand.requests, vec![(cpu(2.0), 3), (strict, 1), (cpu(1.0), 1), (cpu(1.0), 1)]);
        assert_eq!(demand.spread_groups, vec![vec![cpu(2.0), cpu(2.0)]]);
        assert_eq!(demand.nodes[0].idle_ms, 5000);
        assert!(parse_demand(&json!({"result": true})).unwrap_err().contains("loadMetricsReport"));
    }
}
