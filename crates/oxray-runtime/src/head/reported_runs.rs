//! Runs that report to the head as they go: Train runs from their controllers
//! (`UpdateTrainRun`: Ray's `TrainRun` JSON with attempts, workers, errors and
//! checkpoints, and each report's metrics) and Tune experiments from their
//! drivers (`UpdateExperiment`: the trials with their configs and statuses, and
//! each trial result's metrics), for the dashboard, Ray's
//! `/api/train/v2/runs/v1` and `/metrics`. Bounded per kind: the last reports
//! of a run (`OXRAY_TRAIN_REPORTS_KEPT`, 10,000; `OXRAY_TUNE_RESULTS_KEPT`,
//! 20,000) and the last finished runs (`OXRAY_TRAIN_RUNS_KEPT`,
//! `OXRAY_TUNE_EXPERIMENTS_KEPT`: 100); written through to redb on a head with
//! a state directory.

use super::store::{EXPERIMENTS, HeadStore, RunTables, StoreError, TRAIN_RUNS};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Which runs a table holds: where they are stored, what they are called and how many are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Train,
    Experiment,
}

impl RunKind {
    fn tables(self) -> RunTables {
        match self {
            RunKind::Train => TRAIN_RUNS,
            RunKind::Experiment => EXPERIMENTS,
        }
    }

    /// What an error calls one run.
    fn noun(self) -> &'static str {
        match self {
            RunKind::Train => "Train run",
            RunKind::Experiment => "Tune experiment",
        }
    }

    fn setting(name: &str, default: usize) -> usize {
        std::env::var(name).ok().and_then(|raw| raw.trim().parse().ok()).unwrap_or(default)
    }

    /// Reports kept per run, oldest dropped first.
    fn reports_kept(self) -> usize {
        match self {
            RunKind::Train => Self::setting("OXRAY_TRAIN_REPORTS_KEPT", 10_000),
            RunKind::Experiment => Self::setting("OXRAY_TUNE_RESULTS_KEPT", 20_000),
        }
    }

    /// Finished runs kept, oldest forgotten first.
    pub fn runs_kept(self) -> usize {
        match self {
            RunKind::Train => Self::setting("OXRAY_TRAIN_RUNS_KEPT", 100),
            RunKind::Experiment => Self::setting("OXRAY_TUNE_EXPERIMENTS_KEPT", 100),
        }
    }
}

/// A run's state says it ended (both kinds end FINISHED, ERRORED or ABORTED).
fn finished(run: &Value) -> bool {
    matches!(run["status"].as_str(), Some("FINISHED" | "ERRORED" | "ABORTED"))
}

struct Run {
    state: Value,
    /// (number, report), oldest first.
    reports: VecDeque<(u64, Value)>,
    next_report: u64,
}

/// What the head knows of the cluster's runs of one kind.
pub struct ReportedRuns {
    kind: RunKind,
    table: Mutex<Table>,
    store: Option<Arc<HeadStore>>,
    runs_kept: usize,
    reports_kept: usize,
}

#[derive(Default)]
struct Table {
    runs: HashMap<String, Run>,
    /// Run ids in the order they were first seen.
    order: VecDeque<String>,
}

/// A run's state and how many reports the head has taken from it.
pub struct RunSummary {
    pub state: Value,
    pub reports: u64,
}

impl ReportedRuns {
    /// Keeps the kind's numbers of finished runs and of reports per run, loading what `store` holds.
    pub fn new(kind: RunKind, store: Option<Arc<HeadStore>>) -> Result<Self, StoreError> {
        Self::with_limits(kind, store, kind.runs_kept(), kind.reports_kept())
    }

    fn with_limits(
        kind: RunKind,
        store: Option<Arc<HeadStore>>,
        runs_kept: usize,
        reports_kept: usize,
    ) -> Result<Self, StoreError> {
        let runs = ReportedRuns { kind, table: Mutex::default(), store, runs_kept, reports_kept };
        if let Some(store) = &runs.store {
            let mut table = runs.table.lock();
            for (id, state, reports) in store.runs(kind.tables())? {
                let Ok(state) = serde_json::from_slice::<Value>(&state) else { continue };
                let reports: VecDeque<(u64, Value)> =
                    reports.into_iter().filter_map(|(n, r)| serde_json::from_slice(&r).ok().map(|r| (n, r))).collect();
                let next_report = reports.back().map(|(n, _)| n + 1).unwrap_or(0);
                table.order.push_back(id.clone());
                table.runs.insert(id, Run { state, reports, next_report });
            }
            // Oldest first, by when each started.
            let runs_by_start =
                |table: &Table, id: &String| table.runs[id].state["start_time_ns"].as_u64().unwrap_or(0);
            let mut order: Vec<String> = table.order.drain(..).collect();
            order.sort_by_key(|id| runs_by_start(&table, id));
            table.order = order.into();
        }
        Ok(runs)
    }

    /// Takes an update: the run's whole state and its new reports. `Err` names what is wrong with it.
    pub async fn update(&self, id: &str, state: &str, new_reports: &[String]) -> Result<(), String> {
        let noun = self.kind.noun();
        if id.is_empty() {
            return Err(format!("a {noun} update needs the {noun}'s id"));
        }
        let state: Value =
            serde_json::from_str(state).map_err(|e| format!("{noun} {id}: its state is not JSON: {e}"))?;
        if !state.is_object() {
            return Err(format!("{noun} {id}: its state must be a JSON object"));
        }
        let mut parsed = Vec::with_capacity(new_reports.len());
        for report in new_reports {
            parsed.push(
                serde_json::from_str::<Value>(report).map_err(|e| format!("{noun} {id}: a report is not JSON: {e}"))?,
            );
        }
        let (state_bytes, report_bytes, keep_from, forgotten) = {
            let mut table = self.table.lock();
            if !table.runs.contains_key(id) {
                table.order.push_back(id.to_string());
                table.runs.insert(id.to_string(), Run { state: Value::Null, reports: VecDeque::new(), next_report: 0 });
            }
            let run = table.runs.get_mut(id).expect("just inserted");
            run.state = state;
            let mut report_bytes = Vec::new();
            for report in parsed {
                let n = run.next_report;
                run.next_report += 1;
                if self.store.is_some() {
                    report_bytes.push((n, report.to_string().into_bytes()));
                }
                run.reports.push_back((n, report));
            }
            while run.reports.len() > self.reports_kept {
                run.reports.pop_front();
            }
            let keep_from = run.reports.front().map(|(n, _)| *n).unwrap_or(run.next_report);
            let state_bytes = run.state.to_string().into_bytes();
            (state_bytes, report_bytes, keep_from, self.forget_old(&mut table))
        };
        if let Some(store) = self.store.clone() {
            let id = id.to_string();
            let tables = self.kind.tables();
            let write = move || -> Result<(), StoreError> {
                store.put_run(tables, &id, &state_bytes, &report_bytes, keep_from)?;
                store.remove_runs(tables, &forgotten)
            };
            match tokio::task::spawn_blocking(write).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.to_string()),
                Err(e) => return Err(StoreError::Unfinished(e.to_string()).to_string()),
            }
        }
        Ok(())
    }

    /// Drops the oldest finished runs beyond `runs_kept`; their ids.
    fn forget_old(&self, table: &mut Table) -> Vec<String> {
        let mut finished_ids: Vec<String> =
            table.order.iter().filter(|id| finished(&table.runs[*id].state)).cloned().collect();
        let mut forgotten = Vec::new();
        while finished_ids.len() > self.runs_kept {
            let id = finished_ids.remove(0);
            table.runs.remove(&id);
            table.order.retain(|o| *o != id);
            forgotten.push(id);
        }
        forgotten
    }

    /// Every run's state, oldest first.
    pub fn runs(&self) -> Vec<RunSummary> {
        let table = self.table.lock();
        table
            .order
            .iter()
            .filter_map(|id| table.runs.get(id))
            .map(|run| RunSummary { state: run.state.clone(), reports: run.next_report })
            .collect()
    }

    /// One run's state and its kept reports, oldest first.
    pub fn run(&self, id: &str) -> Option<(Value, Vec<Value>)> {
        let table = self.table.lock();
        let run = table.runs.get(id)?;
        Some((run.state.clone(), run.reports.iter().map(|(_, r)| r.clone()).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reports(range: std::ops::Range<u64>) -> Vec<String> {
        range.map(|i| json!({"index": i, "metrics": {"loss": 1.0 / (i + 1) as f64}}).to_string()).collect()
    }

    #[tokio::test]
    async fn only_the_last_reports_and_finished_runs_are_kept_and_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("oxray-train-runs-{}", rand::random::<u64>()));
        {
            let store = Arc::new(HeadStore::open(&dir).unwrap());
            let runs = ReportedRuns::with_limits(RunKind::Train, Some(store), 2, 3).unwrap();
            runs.update("a", &json!({"status": "RUNNING", "start_time_ns": 1}).to_string(), &reports(0..2))
                .await
                .unwrap();
            runs.update("a", &json!({"status": "FINISHED", "start_time_ns": 1}).to_string(), &reports(2..5))
                .await
                .unwrap();
            let (state, kept) = runs.run("a").unwrap();
            assert_eq!(state["status"], "FINISHED");
            assert_eq!(kept.iter().map(|r| r["index"].as_u64().unwrap()).collect::<Vec<_>>(), vec![2, 3, 4]);
            for (id, start) in [("b", 2), ("c", 3)] {
                runs.update(id, &json!({"status": "ERRORED", "start_time_ns": start}).to_string(), &[]).await.unwrap();
            }
            runs.update("live", &json!({"status": "RUNNING", "start_time_ns": 4}).to_string(), &[]).await.unwrap();
            let names: Vec<String> = runs.runs().iter().map(|r| r.state["status"].to_string()).collect();
            assert_eq!(names.len(), 3, "the oldest finished run is forgotten, the running one kept: {names:?}");
            assert!(runs.run("a").is_none());
            assert!(runs.update("x", "not json", &[]).await.unwrap_err().contains("not JSON"));
            assert!(runs.update("x", "[1]", &[]).await.unwrap_err().contains("JSON object"));
        }
        let runs =
            ReportedRuns::with_limits(RunKind::Train, Some(Arc::new(HeadStore::open(&dir).unwrap())), 2, 3).unwrap();
        let loaded: Vec<u64> = runs.runs().iter().map(|r| r.state["start_time_ns"].as_u64().unwrap()).collect();
        assert_eq!(loaded, vec![2, 3, 4], "runs come back oldest first, the forgotten one gone");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn experiments_are_kept_like_train_runs_and_errors_name_them() {
        let experiments = ReportedRuns::with_limits(RunKind::Experiment, None, 1, 2).unwrap();
        let results: Vec<String> = (0..3).map(|i| json!({"trial_id": "t", "iteration": i}).to_string()).collect();
        experiments.update("e1", &json!({"status": "FINISHED"}).to_string(), &results).await.unwrap();
        experiments.update("e2", &json!({"status": "ABORTED"}).to_string(), &[]).await.unwrap();
        assert!(experiments.run("e1").is_none(), "one finished experiment kept: the older goes");
        let (_, kept) = experiments.run("e2").unwrap();
        assert!(kept.is_empty());
        let error = experiments.update("", "{}", &[]).await.unwrap_err();
        assert_eq!(error, "a Tune experiment update needs the Tune experiment's id");
        assert!(experiments.update("e3", "{}", &["{".into()]).await.unwrap_err().starts_with("Tune experiment e3:"));
    }
}
