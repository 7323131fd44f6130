//! The dashboard's Tune pages: every experiment, and one experiment's trials
//! (status, the parameters each tried, iterations, its metric, its Train runs
//! and its error) with two kinds of chart drawn in the browser
//! (`assets/tune.js`): a parameter against a metric, a point per trial, and a
//! metric's curve per trial. Fed by each experiment's driver (`UpdateExperiment`).

use super::Dashboard;
use super::render::{Render, cell, ns_as_ms, ok, page_and_fragment, run_duration};
use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn routes() -> Router<Dashboard> {
    Router::new()
        .route("/api/oxray/tune/experiments", get(experiments_json))
        .route("/api/oxray/tune/experiments/{id}", get(experiment_json))
        .merge(page_and_fragment("/tune", "/ui/tune", experiments_page))
        .merge(page_and_fragment("/tune/{id}", "/ui/tune/{id}", experiment_page))
}

/// The trial statuses in the order a summary lists them.
pub(crate) const TRIAL_STATUSES: [&str; 5] = ["PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"];

/// A metric's value as the tables show it.
fn figure(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) => format!("{x:.4}"),
        None => cell(v),
    }
}

/// Trials of `experiment` by status, every status listed, zeros included.
pub(crate) fn trials_by_status(experiment: &Value) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = TRIAL_STATUSES.iter().map(|s| (s.to_string(), 0)).collect();
    for trial in experiment["trials"].as_array().into_iter().flatten() {
        *counts.entry(cell(&trial["status"])).or_insert(0) += 1;
    }
    counts
}

/// The best last value of the experiment's metric among its trials, by its mode.
fn best(experiment: &Value) -> String {
    let metric = cell(&experiment["metric"]);
    if metric.is_empty() {
        return String::new();
    }
    let values = experiment["trials"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["last_result"][metric.as_str()].as_f64())
        .filter(|x| x.is_finite());
    let pick =
        if experiment["mode"].as_str() == Some("min") { values.reduce(f64::min) } else { values.reduce(f64::max) };
    pick.map(|x| figure(&json!(x))).unwrap_or_default()
}

/// One experiment: a row of the experiments' table, and the head of its page.
struct ExperimentRow {
    id: String,
    name: String,
    status: String,
    detail: String,
    job_id: String,
    trials: usize,
    /// "2 RUNNING, 3 TERMINATED": the statuses some trial has.
    summary: String,
    metric: String,
    best: String,
    start_ms: u64,
    duration: String,
}

impl ExperimentRow {
    fn new(experiment: &Value) -> Self {
        let counts = trials_by_status(experiment);
        let summary: Vec<String> =
            counts.iter().filter(|(_, n)| **n > 0).map(|(status, n)| format!("{n} {status}")).collect();
        let metric = match (cell(&experiment["metric"]), cell(&experiment["mode"])) {
            (metric, _) if metric.is_empty() => String::new(),
            (metric, mode) => format!("{metric} ({mode})"),
        };
        Self {
            id: cell(&experiment["id"]),
            name: cell(&experiment["name"]),
            status: cell(&experiment["status"]),
            detail: cell(&experiment["status_detail"]),
            job_id: cell(&experiment["job_id"]),
            trials: counts.values().sum(),
            summary: summary.join(", "),
            metric,
            best: best(experiment),
            start_ms: ns_as_ms(&experiment["start_time_ns"]),
            duration: run_duration(experiment),
        }
    }
}

/// A Train run a trial started, for a link to its page.
struct TrainLink {
    id: String,
    name: String,
    status: String,
}

/// One trial: its status, the values it tried (one per parameter column), how far it got.
struct TrialRow {
    name: String,
    status: String,
    params: Vec<String>,
    iterations: String,
    metric: String,
    train_runs: Vec<TrainLink>,
    error: String,
}

/// One experiment's page: its fields and trials (what htmx refreshes).
struct ExperimentDetails {
    experiment: ExperimentRow,
    path: String,
    scheduler: String,
    search_alg: String,
    /// The parameter columns: every config key some trial has, sorted.
    params: Vec<String>,
    trials: Vec<TrialRow>,
}

impl ExperimentDetails {
    fn new(experiment: &Value, train_runs: &[Value]) -> Self {
        let trials: Vec<&Value> = experiment["trials"].as_array().into_iter().flatten().collect();
        let params: Vec<String> = trials
            .iter()
            .filter_map(|t| t["config"].as_object())
            .flat_map(|config| config.keys().cloned())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect();
        let id = cell(&experiment["id"]);
        let metric = cell(&experiment["metric"]);
        let rows = trials
            .iter()
            .map(|trial| {
                let trial_id = cell(&trial["trial_id"]);
                let train_runs = train_runs
                    .iter()
                    .filter(|run| {
                        cell(&run["tune"]["experiment_id"]) == id && cell(&run["tune"]["trial_id"]) == trial_id
                    })
                    .map(|run| TrainLink {
                        id: cell(&run["id"]),
                        name: cell(&run["name"]),
                        status: cell(&run["status"]),
                    })
                    .collect();
                TrialRow {
                    name: cell(&trial["trial_name"]),
                    status: cell(&trial["status"]),
                    params: params.iter().map(|p| cell(&trial["config"][p.as_str()])).collect(),
                    iterations: cell(&trial["iterations"]),
                    metric: if metric.is_empty() {
                        String::new()
                    } else {
                        figure(&trial["last_result"][metric.as_str()])
                    },
                    train_runs,
                    error: cell(&trial["error"]),
                }
            })
            .collect();
        Self {
            experiment: ExperimentRow::new(experiment),
            path: cell(&experiment["path"]),
            scheduler: cell(&experiment["scheduler"]),
            search_alg: cell(&experiment["search_alg"]),
            params,
            trials: rows,
        }
    }
}

#[derive(Template)]
#[template(path = "tune_experiments.html")]
struct ExperimentsPage {
    title: &'static str,
    here: &'static str,
    experiments: Vec<ExperimentRow>,
}

/// The experiments' table alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "tune_experiments.html", block = "table")]
struct ExperimentsFragment {
    experiments: Vec<ExperimentRow>,
}

#[derive(Template)]
#[template(path = "tune_experiment.html")]
struct ExperimentPage {
    title: &'static str,
    here: &'static str,
    details: ExperimentDetails,
}

/// The experiment's fields and trials alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "tune_experiment.html", block = "details")]
struct ExperimentFragment {
    details: ExperimentDetails,
}

/// Newest first.
fn experiments(dash: &Dashboard) -> Vec<Value> {
    let mut all = dash.sources.cluster.as_ref().map(|c| c.experiments()).unwrap_or_default();
    all.reverse();
    all
}

fn no_experiment(id: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("no Tune experiment {id:?} on this cluster")).into_response()
}

/// `{"experiments": [...]}`, newest first.
async fn experiments_json(State(dash): State<Dashboard>) -> Response {
    axum::Json(json!({"experiments": experiments(&dash)})).into_response()
}

/// An experiment's state and its trials' kept results, for its page's charts.
async fn experiment_json(State(dash): State<Dashboard>, Path(id): Path<String>) -> Response {
    match dash.sources.cluster.as_ref().and_then(|c| c.experiment(&id)) {
        Some((experiment, results)) => {
            axum::Json(json!({"experiment": experiment, "results": results})).into_response()
        }
        None => no_experiment(&id),
    }
}

/// Every experiment, newest first.
async fn experiments_page(State(dash): State<Dashboard>, render: Render) -> Response {
    let experiments = experiments(&dash).iter().map(ExperimentRow::new).collect();
    match render {
        Render::Page => ok(&ExperimentsPage { title: "Tune", here: "/tune", experiments }),
        Render::Fragment => ok(&ExperimentsFragment { experiments }),
    }
}

/// One experiment; 404 when none has that id.
async fn experiment_page(State(dash): State<Dashboard>, Path(id): Path<String>, render: Render) -> Response {
    let Some(cluster) = dash.sources.cluster.as_ref() else { return no_experiment(&id) };
    let Some((experiment, _)) = cluster.experiment(&id) else { return no_experiment(&id) };
    let details = ExperimentDetails::new(&experiment, &cluster.train_runs());
    match render {
        Render::Page => ok(&ExperimentPage { title: "Tune experiment", here: "/tune", details }),
        Render::Fragment => ok(&ExperimentFragment { details }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_row_has_a_value_per_parameter_column_its_metric_and_its_train_runs() {
        let experiment = json!({
            "id": "e1", "name": "exp", "status": "RUNNING", "metric": "loss", "mode": "min",
            "trials": [
                {"trial_id": "a", "trial_name": "t_a", "status": "TERMINATED", "config": {"lr": 0.1},
                 "iterations": 3, "last_result": {"loss": 0.5}},
                {"trial_id": "b", "trial_name": "t_b", "status": "RUNNING", "config": {"lr": 0.01, "opt": "adam"},
                 "iterations": 1, "last_result": {"loss": 0.25}},
            ],
        });
        let runs = [
            json!({"id": "r1", "name": "run-b", "status": "RUNNING", "tune": {"experiment_id": "e1", "trial_id": "b"}}),
            json!({"id": "r2", "name": "other", "status": "RUNNING", "tune": {"experiment_id": "e2", "trial_id": "b"}}),
        ];
        let details = ExperimentDetails::new(&experiment, &runs);
        assert_eq!(details.params, vec!["lr", "opt"]);
        assert_eq!(details.trials[0].params, vec!["0.1", ""]);
        assert_eq!(details.trials[1].params, vec!["0.01", "adam"]);
        assert_eq!(details.trials[1].metric, "0.2500");
        assert!(details.trials[0].train_runs.is_empty());
        assert_eq!(details.trials[1].train_runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), vec!["r1"]);
        assert_eq!(details.experiment.best, "0.2500", "min mode: the lowest loss");
        assert_eq!(details.experiment.summary, "1 RUNNING, 1 TERMINATED");
        assert_eq!(trials_by_status(&experiment)["ERROR"], 0, "every status is counted, zeros too");
    }
}
