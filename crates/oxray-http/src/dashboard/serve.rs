//! The dashboard's Serve page: the controller and the HTTP options, every application (status,
//! message, route prefix, replicas, when it was deployed) with its deployments and their replicas'
//! states, and charts of each application's request rate, error rate and mean latency
//! (`assets/serve.js`, from every proxy's counters read through the node agents). Fed by what
//! Serve's controller reports to the head (Ray's `ServeInstanceDetails`, the REST API's `GET` too).

use super::Dashboard;
use super::render::{Render, cell, ok, page_and_fragment, short_id};
use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub(super) fn routes() -> Router<Dashboard> {
    Router::new().route("/api/oxray/serve/counters", get(counters_json)).merge(page_and_fragment(
        "/serve",
        "/ui/serve",
        serve_page,
    ))
}

/// Every proxy's counters summed per application, with the time they were read: the page's
/// charts take rates between two reads.
async fn counters_json(State(dash): State<Dashboard>) -> Response {
    let applications = match dash.sources.cluster.as_ref() {
        Some(cluster) => cluster.serve_counters().await,
        None => json!({}),
    };
    axum::Json(json!({"time_ms": oxray_rest::now_ms(), "applications": applications})).into_response()
}

struct ReplicaRow {
    id: String,
    state: String,
    actor: String,
}

struct DeploymentRow {
    name: String,
    status: String,
    trigger: String,
    message: String,
    target: String,
    /// "2 RUNNING, 1 STARTING".
    states: String,
    replicas: Vec<ReplicaRow>,
}

struct AppRow {
    name: String,
    status: String,
    message: String,
    route_prefix: String,
    source: String,
    /// Replicas running out of the deployments' targets.
    replicas: String,
    deployed_ms: u64,
    deployments: Vec<DeploymentRow>,
}

/// What the page shows; `running` false when Serve is not started.
struct ServeView {
    running: bool,
    controller: String,
    http: String,
    proxy_location: String,
    apps: Vec<AppRow>,
}

impl ServeView {
    fn new(details: Option<&Value>) -> Self {
        let Some(details) = details else {
            return ServeView {
                running: false,
                controller: String::new(),
                http: String::new(),
                proxy_location: String::new(),
                apps: Vec::new(),
            };
        };
        let http = &details["http_options"];
        let apps = details["applications"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, app)| {
                let mut running = 0;
                let mut target = 0;
                let deployments = app["deployments"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(d_name, d)| {
                        let replicas: Vec<ReplicaRow> = d["replicas"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|r| ReplicaRow {
                                id: cell(&r["replica_id"]),
                                state: cell(&r["state"]),
                                actor: short_id(&cell(&r["actor_id"])),
                            })
                            .collect();
                        let mut states: BTreeMap<&str, usize> = BTreeMap::new();
                        for r in &replicas {
                            *states.entry(r.state.as_str()).or_default() += 1;
                        }
                        running += states.get("RUNNING").copied().unwrap_or(0);
                        target += d["target_num_replicas"].as_u64().unwrap_or(0) as usize;
                        DeploymentRow {
                            name: d_name.clone(),
                            status: cell(&d["status"]),
                            trigger: cell(&d["status_trigger"]),
                            message: cell(&d["message"]),
                            target: cell(&d["target_num_replicas"]),
                            states: states.iter().map(|(s, n)| format!("{n} {s}")).collect::<Vec<_>>().join(", "),
                            replicas,
                        }
                    })
                    .collect();
                AppRow {
                    name: name.clone(),
                    status: cell(&app["status"]),
                    message: cell(&app["message"]),
                    route_prefix: cell(&app["route_prefix"]),
                    source: cell(&app["source"]),
                    replicas: format!("{running}/{target}"),
                    deployed_ms: (app["last_deployed_time_s"].as_f64().unwrap_or(0.0) * 1000.0) as u64,
                    deployments,
                }
            })
            .collect();
        ServeView {
            running: true,
            controller: short_id(&cell(&details["controller_info"]["actor_id"])),
            http: if http.is_object() {
                format!("{}:{}", cell(&http["host"]), cell(&http["port"]))
            } else {
                String::new()
            },
            proxy_location: cell(&details["proxy_location"]),
            apps,
        }
    }
}

#[derive(Template)]
#[template(path = "serve.html")]
struct ServePage {
    title: &'static str,
    here: &'static str,
    view: ServeView,
}

/// The applications alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "serve.html", block = "table")]
struct ServeFragment {
    view: ServeView,
}

async fn serve_page(State(dash): State<Dashboard>, render: Render) -> Response {
    let details = dash.sources.cluster.as_ref().and_then(|c| c.serve_details());
    let view = ServeView::new(details.as_ref());
    match render {
        Render::Page => ok(&ServePage { title: "Serve", here: "/serve", view }),
        Render::Fragment => ok(&ServeFragment { view }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applications_count_running_replicas_against_their_targets() {
        let details = json!({
            "controller_info": {"actor_id": "abcdef0123456789"},
            "proxy_location": "EveryNode",
            "http_options": {"host": "127.0.0.1", "port": 8000},
            "applications": {"app": {
                "status": "DEPLOYING", "message": "", "route_prefix": "/a", "source": "imperative",
                "last_deployed_time_s": 1.5,
                "deployments": {"D": {"status": "UPDATING", "status_trigger": "CONFIG_UPDATE_STARTED",
                    "message": "", "target_num_replicas": 2,
                    "replicas": [{"replica_id": "r1", "state": "RUNNING"}, {"replica_id": "r2", "state": "STARTING"}]}}}},
        });
        let view = ServeView::new(Some(&details));
        assert!(view.running && view.http == "127.0.0.1:8000");
        let app = &view.apps[0];
        assert_eq!((app.replicas.as_str(), app.deployed_ms), ("1/2", 1500));
        assert_eq!(app.deployments[0].states, "1 RUNNING, 1 STARTING");
        assert!(!ServeView::new(None).running);
    }
}
