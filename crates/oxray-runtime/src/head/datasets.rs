//! Data executions as the processes running them report them
//! (`UpdateDataset`): each one's JSON (operators, rows, bytes, blocks in
//! flight, memory held, time waiting on the consumer), the last
//! `OXRAY_HEAD_HISTORY` finished ones kept, in memory.

use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};

fn finished(state: &Value) -> bool {
    matches!(state["state"].as_str(), Some("FINISHED" | "FAILED"))
}

#[derive(Default)]
pub struct Datasets {
    table: Mutex<Table>,
    kept: usize,
}

#[derive(Default)]
struct Table {
    by_id: HashMap<String, Value>,
    /// Ids in the order first seen.
    order: VecDeque<String>,
}

impl Datasets {
    pub fn new(kept: usize) -> Self {
        Datasets { table: Mutex::default(), kept }
    }

    /// Takes an execution's figures; `Err` says what is wrong with them.
    pub fn update(&self, id: &str, json: &str) -> Result<(), String> {
        if id.is_empty() {
            return Err("a dataset update needs the execution's id".into());
        }
        let state: Value = serde_json::from_str(json).map_err(|e| format!("dataset {id}: not JSON: {e}"))?;
        if !state.is_object() {
            return Err(format!("dataset {id}: its figures must be a JSON object"));
        }
        let mut table = self.table.lock();
        if table.by_id.insert(id.to_string(), state).is_none() {
            table.order.push_back(id.to_string());
        }
        let ended: Vec<String> = table.order.iter().filter(|i| finished(&table.by_id[*i])).cloned().collect();
        for old in ended.iter().take(ended.len().saturating_sub(self.kept)) {
            table.by_id.remove(old);
            table.order.retain(|i| i != old);
        }
        Ok(())
    }

    /// Every kept execution, oldest first.
    pub fn list(&self) -> Vec<Value> {
        let table = self.table.lock();
        table.order.iter().filter_map(|id| table.by_id.get(id).cloned()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_last_finished_executions_are_kept() {
        let datasets = Datasets::new(2);
        for (id, state) in [("a", "FINISHED"), ("b", "RUNNING"), ("c", "FINISHED"), ("d", "FAILED")] {
            datasets.update(id, &json!({"id": id, "state": state}).to_string()).unwrap();
        }
        let ids: Vec<String> = datasets.list().iter().map(|d| d["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(ids, vec!["b", "c", "d"], "the running one stays, the oldest finished goes");
        assert!(datasets.update("x", "[]",).unwrap_err().contains("JSON object"));
        assert!(datasets.update("", "{}").is_err());
    }
}
