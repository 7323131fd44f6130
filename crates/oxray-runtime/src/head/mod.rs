//! The head service: the cluster's tables (nodes, actors and their names,
//! placement groups, drivers), fed by the node agents over gRPC, kept in redb
//! when the head has a state directory.
//!
//! `Head` composes one part per table, each a struct with private fields and a
//! small API behind its own lock (never two of them held at once), and each file
//! also holds the `Head` methods of its concern:
//! - `nodes`: `NodeTable` (registrations, heartbeats, samples, idle time, liveness);
//! - `actors`: `ActorTable` (actors, the names of live ones, the last dead ones);
//! - `groups`: `GroupTable` (placement groups, the last removed ones) and the placement loop;
//! - `drivers`: `DriverTable` (the cluster's drivers, the last ended ones);
//! - `load_report`: what an autoscaler reads of the tables;
//! - `service`: the gRPC `HeadService`, thin handlers that check a request and call the parts;
//! - `error`: `HeadError`, and its one mapping to a gRPC status.
//!
//! What the head serves beside its tables sits here too: its redb tables
//! (`store`), placement-group planning (`placement`), what the Jobs API needs of
//! the head (`job_resources`), the State API's rows (`cluster_state`), Train runs
//! and Tune experiments (`reported_runs`), Data executions (`datasets`) and
//! Serve's details and controller checkpoint (`serve_state`).

use crate::client::{AgentChannels, NodeJobClient, NodeStateClient};
use crate::ids::{ActorId, NodeId};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Instant;

mod actors;
mod drivers;
mod error;
mod groups;
mod load_report;
mod nodes;
mod service;
#[cfg(test)]
mod tests;

pub mod cluster_state;
pub mod datasets;
pub mod job_resources;
pub mod placement;
pub mod reported_runs;
pub mod serve_state;
pub mod store;

pub use actors::dead_actor_limit;
pub use error::HeadError;
pub use nodes::{NODE_TIMEOUT, metrics_window_ms};

use actors::ActorTable;
use datasets::Datasets;
use drivers::DriverTable;
use groups::GroupTable;
use nodes::{MetricsWindow, NodeTable};
use reported_runs::{ReportedRuns, RunKind};
use serve_state::ServeState;
use store::HeadStore;

/// How many dead actors, removed placement groups and dead nodes the head keeps
/// (each) for listings; older ones are forgotten, in memory and in redb, so the
/// tables of a long-lived cluster stop growing. Ray keeps a bounded history too.
/// `OXRAY_HEAD_HISTORY` sets it (tests use a small one).
#[derive(Clone, Copy)]
struct History(usize);

const DEFAULT_HISTORY: usize = 1000;

impl Default for History {
    fn default() -> Self {
        History(history_limit())
    }
}

/// How many dead actors (and removed groups, dead nodes) are remembered:
/// `OXRAY_HEAD_HISTORY`, else 1,000. Node agents keep as many dead actors.
pub fn history_limit() -> usize {
    let Ok(raw) = std::env::var("OXRAY_HEAD_HISTORY") else { return DEFAULT_HISTORY };
    raw.trim().parse().unwrap_or_else(|_| {
        tracing::warn!("OXRAY_HEAD_HISTORY={raw:?} is not a whole number of records; using {DEFAULT_HISTORY}");
        DEFAULT_HISTORY
    })
}

#[derive(Clone)]
pub struct Head {
    nodes: Arc<Mutex<NodeTable>>,
    actors: Arc<Mutex<ActorTable>>,
    /// Durable copy of the tables, when the head has a state directory.
    store: Option<Arc<HeadStore>>,
    groups: Arc<Mutex<GroupTable>>,
    /// One placement attempt at a time, so two never take the same resources.
    placing: Arc<tokio::sync::Mutex<()>>,
    /// Wakes the placement loop before its next tick: resources were given back, or a node
    /// beat while groups wait.
    retry_placement: Arc<tokio::sync::Notify>,
    /// How many dead nodes, removed groups and ended drivers are kept.
    history: History,
    /// How many dead actors are kept (`dead_actor_limit`).
    dead_actors: History,
    /// The cluster token, for the head's own calls to node agents.
    token: Arc<Mutex<String>>,
    channels: Arc<AgentChannels>,
    /// Bumped whenever a group is placed or a node registers or comes back, for waiters.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// The cluster's drivers (jobs), as agents report them; kept in memory, the
    /// last `history` ended ones with them.
    drivers: Arc<Mutex<DriverTable>>,
    /// How long each node's samples are kept (`OXRAY_METRICS_WINDOW_S`).
    metrics_window: MetricsWindow,
    /// The cluster's Train runs, as their controllers report them.
    train_runs: Arc<ReportedRuns>,
    /// The cluster's Tune experiments, as their drivers report them.
    experiments: Arc<ReportedRuns>,
    /// Serve's applications as its controller last reported them, and its checkpoint.
    serve: Arc<ServeState>,
    /// The cluster's Data executions, as the processes running them report them.
    datasets: Arc<Datasets>,
}

impl Default for Head {
    /// A head whose tables live in memory only.
    fn default() -> Self {
        let history = History::default();
        Head {
            nodes: Arc::default(),
            actors: Arc::default(),
            store: None,
            groups: Arc::default(),
            placing: Arc::default(),
            retry_placement: Arc::default(),
            history,
            dead_actors: History(dead_actor_limit()),
            token: Arc::default(),
            channels: Arc::default(),
            changes: Arc::default(),
            drivers: Arc::default(),
            metrics_window: MetricsWindow::default(),
            train_runs: Arc::new(ReportedRuns::new(RunKind::Train, None).expect("no store: nothing to load")),
            experiments: Arc::new(ReportedRuns::new(RunKind::Experiment, None).expect("no store: nothing to load")),
            serve: Arc::new(ServeState::new(None).expect("no store: nothing to load")),
            datasets: Arc::new(Datasets::new(history.0)),
        }
    }
}

impl Head {
    /// A head whose tables live in `<state_dir>/head.redb` and survive a restart.
    /// Nodes loaded from it count as dead until they register or beat again.
    pub fn persistent(state_dir: &std::path::Path) -> Result<Self, HeadError> {
        let store = HeadStore::open(state_dir)?;
        let head = Head { store: None, ..Default::default() };
        let stale = Instant::now().checked_sub(NODE_TIMEOUT).unwrap_or_else(Instant::now);
        let loaded_nodes = store.nodes()?;
        let mut loaded_actors = store.actors()?;
        actors::fail_actors_of_previous_head(&store, &loaded_nodes, &mut loaded_actors)?;
        {
            let mut nodes = head.nodes.lock();
            for info in loaded_nodes {
                nodes.insert(NodeId::from_bytes(&info.node_id)?, info, stale);
            }
        }
        let mut forgotten_actors = Vec::new();
        {
            let mut table = head.actors.lock();
            for actor in loaded_actors {
                forgotten_actors.extend(table.load(actor, head.dead_actors)?);
            }
        }
        let store = Arc::new(store);
        let train_runs = Arc::new(ReportedRuns::new(RunKind::Train, Some(store.clone()))?);
        let experiments = Arc::new(ReportedRuns::new(RunKind::Experiment, Some(store.clone()))?);
        let serve = Arc::new(ServeState::new(Some(store.clone()))?);
        let head = Head { store: Some(store), train_runs, experiments, serve, ..head };
        let forgotten_nodes = head.nodes.lock().prune_dead(head.history);
        head.forget(forgotten_nodes, forgotten_actors);
        Ok(head)
    }

    /// Drops forgotten records from redb. Not fatal: a leftover row is pruned
    /// again when the head next loads.
    fn forget(&self, nodes: Vec<NodeId>, actors: Vec<ActorId>) {
        if let Some(store) = &self.store {
            let nodes: Vec<Vec<u8>> = nodes.iter().map(|n| n.to_vec()).collect();
            let actors: Vec<Vec<u8>> = actors.iter().map(|a| a.to_vec()).collect();
            if let Err(e) = store.remove(&nodes, &actors) {
                tracing::warn!("could not drop forgotten records from the head's state store: {e}");
            }
        }
    }

    /// The cluster token, for the head's own calls to node agents.
    pub fn set_token(&self, token: &str) {
        *self.token.lock() = token.to_string();
    }

    fn address_of(&self, node_id: &[u8]) -> Result<String, String> {
        NodeId::from_bytes(node_id)
            .ok()
            .and_then(|id| self.nodes.lock().address(&id))
            .ok_or_else(|| format!("node {} is not part of the cluster", hex::encode(node_id)))
    }

    /// The jobs service of node `node_id`'s agent (over the head's own channels to agents).
    pub async fn node_jobs(&self, node_id: &[u8]) -> Result<NodeJobClient, String> {
        let address = self.address_of(node_id)?;
        let token = self.token.lock().clone();
        self.channels.node_jobs(&address, &token).await.map_err(|e| e.to_string())
    }

    /// The state service of node `node_id`'s agent (its tasks, for the State API).
    pub async fn node_state(&self, node_id: &[u8]) -> Result<NodeStateClient, String> {
        let address = self.address_of(node_id)?;
        let token = self.token.lock().clone();
        self.channels.node_state(&address, &token).await.map_err(|e| e.to_string())
    }

    /// Changes when a group is placed or a node registers.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The cluster's Train runs.
    pub fn train_runs(&self) -> &ReportedRuns {
        &self.train_runs
    }

    /// The cluster's Tune experiments.
    pub fn experiments(&self) -> &ReportedRuns {
        &self.experiments
    }

    /// Serve's details (what its controller last reported) and controller checkpoint.
    pub fn serve(&self) -> &ServeState {
        &self.serve
    }

    /// The cluster's Data executions.
    pub fn datasets(&self) -> &Datasets {
        &self.datasets
    }
}
