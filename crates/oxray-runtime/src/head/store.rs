//! The head's durable state in redb: node and actor records (protobuf-encoded),
//! Train runs and Tune experiments with their reports (JSON), and Serve's
//! controller checkpoint (opaque bytes), written
//! through on every change and loaded when the head starts again.

#[cfg(test)]
use oxray_proto::ActorState;
use oxray_proto::{ActorInfo, NodeInfo};
use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const NODES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("nodes");
const ACTORS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("actors");
/// Serve's controller checkpoint, under `SERVE_CHECKPOINT`.
const SERVE: TableDefinition<&str, &[u8]> = TableDefinition::new("serve");
const SERVE_CHECKPOINT: &str = "controller_checkpoint";

/// The two tables of one kind of reported run: id -> the run's JSON, and
/// (id, report number) -> the report's JSON.
#[derive(Clone, Copy)]
pub struct RunTables {
    runs: TableDefinition<'static, &'static str, &'static [u8]>,
    reports: TableDefinition<'static, (&'static str, u64), &'static [u8]>,
}

/// Train runs and their reports.
pub const TRAIN_RUNS: RunTables =
    RunTables { runs: TableDefinition::new("train_runs"), reports: TableDefinition::new("train_reports") };
/// Tune experiments and their trials' results.
pub const EXPERIMENTS: RunTables =
    RunTables { runs: TableDefinition::new("experiments"), reports: TableDefinition::new("experiment_results") };

/// A run as stored: its JSON and its kept reports (number, JSON), oldest first.
pub type StoredRun = (String, Vec<u8>, Vec<(u64, Vec<u8>)>);

pub struct HeadStore {
    db: Database,
}

/// What can go wrong with the head's durable state.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the head's state directory {path}: {source}")]
    Dir { path: String, source: std::io::Error },
    #[error("cannot open the head's state store {path}: {source}")]
    Open { path: String, source: redb::DatabaseError },
    #[error(
        "the state directory {dir} is in use by another head (its store is locked). Stop that head \
         (`oxray stop`), or give this one its own directory with --state-dir"
    )]
    InUse { dir: String },
    #[error("the head's state store failed: {0}")]
    Db(#[from] redb::Error),
    #[error("a record in the head's state store is corrupt: {0}")]
    Corrupt(#[from] prost::DecodeError),
    #[error("a write to the head's state store did not finish: {0}")]
    Unfinished(String),
}

/// Any redb failure inside a transaction.
fn db(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Db(e.into())
}

fn put(db_: &Database, table: TableDefinition<&[u8], &[u8]>, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    let txn = db_.begin_write().map_err(db)?;
    {
        let mut t = txn.open_table(table).map_err(db)?;
        t.insert(key, value).map_err(db)?;
    }
    txn.commit().map_err(db)
}

fn load<M: Message + Default>(db_: &Database, table: TableDefinition<&[u8], &[u8]>) -> Result<Vec<M>, StoreError> {
    let txn = db_.begin_read().map_err(db)?;
    let t = match txn.open_table(table) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(db(e)),
    };
    let mut out = Vec::new();
    for row in t.iter().map_err(db)? {
        let (_, value) = row.map_err(db)?;
        out.push(M::decode(value.value())?);
    }
    Ok(out)
}

impl HeadStore {
    /// Opens (or creates) `<dir>/head.redb`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join("head.redb");
        let shown = || path.display().to_string();
        oxray_object_store::create_private_dir_all(dir).map_err(|source| StoreError::Dir { path: shown(), source })?;
        // Created 0600 here, since redb would create it with the umask's mode.
        oxray_object_store::private_file_options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| StoreError::Dir { path: shown(), source })?;
        let db = Database::create(&path).map_err(|source| match source {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse { dir: dir.display().to_string() },
            source => StoreError::Open { path: shown(), source },
        })?;
        Ok(HeadStore { db })
    }

    pub fn put_node(&self, node: &NodeInfo) -> Result<(), StoreError> {
        put(&self.db, NODES, &node.node_id, &node.encode_to_vec())
    }

    pub fn put_actor(&self, actor: &ActorInfo) -> Result<(), StoreError> {
        put(&self.db, ACTORS, &actor.actor_id, &actor.encode_to_vec())
    }

    /// Deletes the records of forgotten nodes and actors, in one transaction.
    pub fn remove(&self, nodes: &[Vec<u8>], actors: &[Vec<u8>]) -> Result<(), StoreError> {
        if nodes.is_empty() && actors.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(db)?;
        for (table, keys) in [(NODES, nodes), (ACTORS, actors)] {
            if keys.is_empty() {
                continue;
            }
            let mut t = txn.open_table(table).map_err(db)?;
            for key in keys {
                t.remove(key.as_slice()).map_err(db)?;
            }
        }
        txn.commit().map_err(db)
    }

    /// Writes Serve's controller checkpoint; None deletes it.
    pub fn put_serve_checkpoint(&self, checkpoint: Option<&[u8]>) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(db)?;
        {
            let mut t = txn.open_table(SERVE).map_err(db)?;
            match checkpoint {
                Some(bytes) => drop(t.insert(SERVE_CHECKPOINT, bytes).map_err(db)?),
                None => drop(t.remove(SERVE_CHECKPOINT).map_err(db)?),
            }
        }
        txn.commit().map_err(db)
    }

    /// Serve's controller checkpoint, if one is kept.
    pub fn serve_checkpoint(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let t = match txn.open_table(SERVE) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(db(e)),
        };
        Ok(t.get(SERVE_CHECKPOINT).map_err(db)?.map(|v| v.value().to_vec()))
    }

    /// Holds redb's one write transaction until the guard drops: a commit that takes long.
    #[cfg(test)]
    pub(crate) fn hold_writes(&self) -> redb::WriteTransaction {
        self.db.begin_write().unwrap()
    }

    /// Writes a run's JSON and its new reports, and deletes its reports numbered below `keep_from`.
    pub fn put_run(
        &self,
        tables: RunTables,
        id: &str,
        run: &[u8],
        reports: &[(u64, Vec<u8>)],
        keep_from: u64,
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(db)?;
        {
            txn.open_table(tables.runs).map_err(db)?.insert(id, run).map_err(db)?;
            let mut t = txn.open_table(tables.reports).map_err(db)?;
            for (n, report) in reports {
                t.insert((id, *n), report.as_slice()).map_err(db)?;
            }
            t.retain_in((id, 0)..(id, keep_from), |_, _| false).map_err(db)?;
        }
        txn.commit().map_err(db)
    }

    /// Deletes forgotten runs and their reports.
    pub fn remove_runs(&self, tables: RunTables, ids: &[String]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(db)?;
        {
            let mut runs = txn.open_table(tables.runs).map_err(db)?;
            let mut reports = txn.open_table(tables.reports).map_err(db)?;
            for id in ids {
                runs.remove(id.as_str()).map_err(db)?;
                reports.retain_in((id.as_str(), 0)..=(id.as_str(), u64::MAX), |_, _| false).map_err(db)?;
            }
        }
        txn.commit().map_err(db)
    }

    /// Every stored run with its reports.
    pub fn runs(&self, tables: RunTables) -> Result<Vec<StoredRun>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let runs = match txn.open_table(tables.runs) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(db(e)),
        };
        let reports = match txn.open_table(tables.reports) {
            Ok(t) => Some(t),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(db(e)),
        };
        let mut out = Vec::new();
        for row in runs.iter().map_err(db)? {
            let (id, run) = row.map_err(db)?;
            let id = id.value().to_string();
            let mut kept = Vec::new();
            if let Some(reports) = &reports {
                for row in reports.range((id.as_str(), 0)..=(id.as_str(), u64::MAX)).map_err(db)? {
                    let (key, value) = row.map_err(db)?;
                    kept.push((key.value().1, value.value().to_vec()));
                }
            }
            out.push((id, run.value().to_vec(), kept));
        }
        Ok(out)
    }

    pub fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError> {
        load(&self.db, NODES)
    }

    pub fn actors(&self) -> Result<Vec<ActorInfo>, StoreError> {
        load(&self.db, ACTORS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening() {
        let dir = std::env::temp_dir().join(format!("oxray-head-store-{}", rand::random::<u64>()));
        {
            let store = HeadStore::open(&dir).unwrap();
            assert!(store.nodes().unwrap().is_empty());
            store
                .put_node(&NodeInfo { node_id: vec![1; 16], address: "127.0.0.1:1".into(), ..Default::default() })
                .unwrap();
            let actor = ActorInfo {
                actor_id: vec![2; 16],
                name: "a".into(),
                state: ActorState::Alive as i32,
                ..Default::default()
            };
            store.put_actor(&actor).unwrap();
            store.put_actor(&ActorInfo { state: ActorState::Dead as i32, ..actor }).unwrap();
        }
        let store = HeadStore::open(&dir).unwrap();
        let nodes = store.nodes().unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].address, "127.0.0.1:1");
        let actors = store.actors().unwrap();
        assert_eq!(actors.len(), 1);
        assert_eq!(actors[0].state(), ActorState::Dead, "the latest write wins");
        store.remove(&[vec![1; 16]], &[vec![2; 16]]).unwrap();
        assert!(store.nodes().unwrap().is_empty() && store.actors().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn runs_keep_their_newest_reports_across_reopening_each_kind_in_its_tables() {
        let dir = std::env::temp_dir().join(format!("oxray-head-store-{}", rand::random::<u64>()));
        {
            let store = HeadStore::open(&dir).unwrap();
            let reports: Vec<(u64, Vec<u8>)> = (0..5).map(|n| (n, format!("{{\"n\":{n}}}").into_bytes())).collect();
            store.put_run(TRAIN_RUNS, "run-a", b"{}", &reports, 0).unwrap();
            store.put_run(TRAIN_RUNS, "run-a", b"{\"status\":\"FINISHED\"}", &[(5, b"{}".to_vec())], 3).unwrap();
            store.put_run(TRAIN_RUNS, "run-b", b"{}", &[], 0).unwrap();
            store.remove_runs(TRAIN_RUNS, &["run-b".to_string()]).unwrap();
            store.put_run(EXPERIMENTS, "exp-a", b"{}", &reports[..1], 0).unwrap();
        }
        let store = HeadStore::open(&dir).unwrap();
        let runs = store.runs(TRAIN_RUNS).unwrap();
        assert_eq!(runs.len(), 1);
        let (id, run, reports) = &runs[0];
        assert_eq!((id.as_str(), run.as_slice()), ("run-a", b"{\"status\":\"FINISHED\"}".as_slice()));
        assert_eq!(reports.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![3, 4, 5]);
        let experiments = store.runs(EXPERIMENTS).unwrap();
        assert_eq!(experiments.iter().map(|(id, _, r)| (id.as_str(), r.len())).collect::<Vec<_>>(), vec![("exp-a", 1)]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_second_open_names_the_state_dir_and_the_store_is_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("oxray-head-store-{}", rand::random::<u64>()));
        let _first = HeadStore::open(&dir).unwrap();
        let Err(second) = HeadStore::open(&dir) else { panic!("a second head opened a locked store") };
        let message = second.to_string();
        assert!(message.contains(&dir.display().to_string()) && message.contains("--state-dir"), "{message}");
        assert_eq!(std::fs::metadata(dir.join("head.redb")).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(dir);
    }
}
