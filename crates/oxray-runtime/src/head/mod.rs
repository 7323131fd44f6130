//! The head service: the cluster's node table, fed by registrations and heartbeats.

use crate::client::{AgentChannels, BundleClient, ClientError, NodeJobClient, NodeStateClient};
use crate::datasets::Datasets;
use crate::head_store::{HeadStore, StoreError};
use crate::ids::{ActorId, IdError, NodeId, PlacementGroupId};
use crate::labels::LabelSelector;
use crate::placement::{Strategy, StrategyError, plan, plan_in_domains};
use crate::resources::{ResourceError, ResourceSet, hold_bundle};
use crate::train_runs::{TrainRuns, runs_kept as train_runs_kept};
use oxray_proto::head_service_server::HeadService;
use oxray_proto::{
    ActorInfo, ActorRequest, ActorState, BundleSlot, ClusterInfoReply, DatasetUpdate, DriverRecord, Empty,
    GetNamedActorReply, GetNamedActorRequest, HeartbeatRequest, ListActorsReply, ListPlacementGroupsReply, NodeInfo,
    NodeStats, PlacementGroupInfo, PlacementGroupReply, PlacementGroupRequest, PlacementGroupSpec, PlacementGroupState,
    RegisterActorReply, RegisterActorRequest, RegisterNodeRequest, ReserveBundlesRequest, ResourceDemand,
    TrainRunUpdate,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

/// A node that has not sent a heartbeat for this long is reported dead
/// (agents beat every second).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the head waits on an agent's bundle call: a healthy agent answers at once, one
/// silent this long counts as dead anyway, and a frozen node must not hold up every group.
const BUNDLE_CALL_DEADLINE: Duration = NODE_TIMEOUT;

fn bundle_call<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(BUNDLE_CALL_DEADLINE);
    request
}

/// What the head refuses, and the one place each refusal becomes a gRPC status.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error(transparent)]
    BadId(#[from] IdError),
    /// A request missing a part it must have.
    #[error("{0}")]
    Malformed(&'static str),
    #[error("unknown node {0}: register before sending heartbeats")]
    UnknownNode(NodeId),
    #[error(
        "The name {name:?} (namespace={namespace:?}) is already taken by another actor. Please use a \
         different name, or get_if_exists=True to get that one"
    )]
    NameTaken { name: String, namespace: String },
    #[error("no placement group {0}")]
    UnknownPlacementGroup(PlacementGroupId),
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    #[error("a placement group needs at least one bundle")]
    NoBundles,
    #[error("bundle {index}: {source}")]
    BadBundle { index: usize, source: ResourceError },
    #[error("bundle {0} is empty: every bundle needs at least one resource greater than 0")]
    EmptyBundle(usize),
    #[error("bundle {index}: {source}")]
    BadLabelSelector { index: usize, source: crate::labels::LabelError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<HeadError> for Status {
    fn from(e: HeadError) -> Self {
        let message = e.to_string();
        match e {
            HeadError::BadId(_)
            | HeadError::Malformed(_)
            | HeadError::Strategy(_)
            | HeadError::NoBundles
            | HeadError::BadBundle { .. }
            | HeadError::BadLabelSelector { .. }
            | HeadError::EmptyBundle(_) => Status::invalid_argument(message),
            HeadError::UnknownNode(_) | HeadError::UnknownPlacementGroup(_) => Status::not_found(message),
            HeadError::NameTaken { .. } => Status::already_exists(message),
            HeadError::Store(_) => Status::internal(message),
        }
    }
}

struct NodeRecord {
    info: NodeInfo,
    last_seen: Instant,
    /// The node's samples within the metrics window, oldest first.
    samples: std::collections::VecDeque<NodeStats>,
    /// Work queued on the node that waits for resources (its last beat's).
    demand: Vec<ResourceDemand>,
    /// Since when none of its resources has been in use (`None`: in use now).
    idle_since: Option<Instant>,
    /// The head could not reach its agent since its last beat: placement groups skip it
    /// (a node just killed still looks alive for `NODE_TIMEOUT`).
    unreachable: bool,
}

impl NodeRecord {
    fn new(info: NodeInfo, last_seen: Instant) -> Self {
        Self {
            info,
            last_seen,
            samples: std::collections::VecDeque::new(),
            demand: Vec::new(),
            idle_since: Some(last_seen),
            unreachable: false,
        }
    }

    /// Nothing is in use: every resource but the object store is all there, and its last sample saw
    /// no running task and no object (without lineage, a node holding objects is not idle).
    fn unused(&self) -> bool {
        let resources_free = self
            .info
            .total
            .iter()
            .filter(|(name, _)| name.as_str() != "object_store_memory")
            .all(|(name, total)| self.info.available.get(name).is_some_and(|a| (a - total).abs() < 1e-6));
        let quiet = self.samples.back().is_none_or(|s| s.tasks_running == 0 && s.store_objects == 0);
        resources_free && quiet
    }
}

const DEFAULT_METRICS_WINDOW_S: u64 = 3600;

/// `OXRAY_METRICS_WINDOW_S`, else an hour: how far back the head keeps each node's samples.
pub fn metrics_window_ms() -> u64 {
    std::env::var("OXRAY_METRICS_WINDOW_S")
        .ok()
        .and_then(|raw| raw.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_METRICS_WINDOW_S)
        .saturating_mul(1000)
}

#[derive(Default)]
struct ActorTable {
    actors: HashMap<ActorId, ActorInfo>,
    /// (namespace, name) -> actor id, for live named actors.
    names: HashMap<(String, String), ActorId>,
    /// Dead actors, oldest first: only the last `History` of them are kept.
    dead: std::collections::VecDeque<ActorId>,
}

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

/// How many dead actors are remembered: Ray's `RAY_maximum_gcs_destroyed_actor_cached_count`
/// when set, else `history_limit()`. Node agents keep as many.
pub fn dead_actor_limit() -> usize {
    const RAY_NAME: &str = "RAY_maximum_gcs_destroyed_actor_cached_count";
    let Ok(raw) = std::env::var(RAY_NAME) else { return history_limit() };
    raw.trim().parse().unwrap_or_else(|_| {
        let fallback = history_limit();
        tracing::warn!("{RAY_NAME}={raw:?} is not a whole number of actors; using {fallback}");
        fallback
    })
}

impl ActorTable {
    /// Records that `id` died; returns the ids of dead actors now forgotten.
    fn note_dead(&mut self, id: ActorId, keep: History) -> Vec<ActorId> {
        if !self.dead.contains(&id) {
            self.dead.push_back(id);
        }
        let mut forgotten = Vec::new();
        while self.dead.len() > keep.0 {
            let Some(old) = self.dead.pop_front() else { break };
            self.actors.remove(&old);
            forgotten.push(old);
        }
        forgotten
    }
}

#[derive(Clone)]
pub struct Head {
    nodes: Arc<Mutex<HashMap<NodeId, NodeRecord>>>,
    actors: Arc<Mutex<ActorTable>>,
    /// Durable copy of the tables, when the head has a state directory.
    store: Option<Arc<HeadStore>>,
    groups: Arc<Mutex<HashMap<PlacementGroupId, PlacementGroupInfo>>>,
    /// One placement attempt at a time, so two never take the same resources.
    placing: Arc<tokio::sync::Mutex<()>>,
    /// Removed placement groups, oldest first (the last `history` are kept).
    removed_groups: Arc<Mutex<std::collections::VecDeque<PlacementGroupId>>>,
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
    train_runs: Arc<TrainRuns>,
    /// The cluster's Data executions, as the processes running them report them.
    datasets: Arc<Datasets>,
}

/// Milliseconds of samples kept per node.
#[derive(Clone, Copy)]
struct MetricsWindow(u64);

impl Default for MetricsWindow {
    fn default() -> Self {
        MetricsWindow(metrics_window_ms())
    }
}

#[derive(Default)]
struct DriverTable {
    by_job: HashMap<Vec<u8>, DriverRecord>,
    /// Ended drivers, oldest first.
    ended: std::collections::VecDeque<Vec<u8>>,
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
            removed_groups: Arc::default(),
            history,
            dead_actors: History(dead_actor_limit()),
            token: Arc::default(),
            channels: Arc::default(),
            changes: Arc::default(),
            drivers: Arc::default(),
            metrics_window: MetricsWindow::default(),
            train_runs: Arc::new(TrainRuns::new(None, train_runs_kept()).expect("no store: nothing to load")),
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
        fail_actors_of_previous_head(&store, &loaded_nodes, &mut loaded_actors)?;
        let mut forgotten_actors = Vec::new();
        {
            let mut nodes = head.nodes.lock();
            for info in loaded_nodes {
                nodes.insert(NodeId::from_bytes(&info.node_id)?, NodeRecord::new(info, stale));
            }
            let mut table = head.actors.lock();
            for actor in loaded_actors {
                let id = ActorId::from_bytes(&actor.actor_id)?;
                if actor.state() != ActorState::Dead && !actor.name.is_empty() {
                    table.names.insert((actor.namespace.clone(), actor.name.clone()), id);
                }
                let dead = actor.state() == ActorState::Dead;
                table.actors.insert(id, actor);
                if dead {
                    forgotten_actors.extend(table.note_dead(id, head.dead_actors));
                }
            }
        }
        let store = Arc::new(store);
        let train_runs = Arc::new(TrainRuns::new(Some(store.clone()), train_runs_kept())?);
        let head = Head { store: Some(store), train_runs, ..head };
        head.forget(head.prune_dead_nodes(), forgotten_actors);
        Ok(head)
    }

    fn persist_node(&self, info: &NodeInfo) -> Result<(), HeadError> {
        match &self.store {
            Some(store) => Ok(store.put_node(info)?),
            None => Ok(()),
        }
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

    /// Forgets the dead nodes beyond the last `history`, in memory and in redb.
    fn forget_old_dead_nodes(&self) {
        let forgotten = self.prune_dead_nodes();
        self.forget(forgotten, Vec::new());
    }

    /// Forgets the dead nodes beyond the last `history` (longest silent first).
    fn prune_dead_nodes(&self) -> Vec<NodeId> {
        let mut nodes = self.nodes.lock();
        let mut dead: Vec<(Instant, NodeId)> = nodes
            .iter()
            .filter(|(_, r)| r.last_seen.elapsed() >= NODE_TIMEOUT)
            .map(|(id, r)| (r.last_seen, *id))
            .collect();
        if dead.len() <= self.history.0 {
            return Vec::new();
        }
        dead.sort();
        let forgotten: Vec<NodeId> = dead[..dead.len() - self.history.0].iter().map(|(_, id)| *id).collect();
        for id in &forgotten {
            nodes.remove(id);
        }
        forgotten
    }

    /// Writes the actor's record through; the commit (an fsync) runs on a blocking
    /// thread, never under the actor table's lock.
    async fn persist_actor(&self, info: ActorInfo) -> Result<(), HeadError> {
        let Some(store) = self.store.clone() else { return Ok(()) };
        match tokio::task::spawn_blocking(move || store.put_actor(&info)).await {
            Ok(result) => Ok(result?),
            Err(e) => Err(StoreError::Unfinished(e.to_string()).into()),
        }
    }

    pub fn set_token(&self, token: &str) {
        *self.token.lock() = token.to_string();
    }

    /// Retries pending placement groups as nodes join and resources free up.
    /// A restarted head also gives its nodes on record `NODE_TIMEOUT` to beat
    /// again, then fails the actors of those that did not.
    pub fn spawn_placement_loop(&self) -> tokio::task::JoinHandle<()> {
        let head = self.clone();
        tokio::spawn(async move {
            if head.store.is_some() {
                tokio::time::sleep(NODE_TIMEOUT).await;
                if let Err(e) = head.fail_actors_of_silent_nodes().await {
                    tracing::warn!("cannot record the actors of nodes that did not come back: {e}");
                }
            }
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                // Here rather than on each node's heartbeat: one scan per tick for the whole cluster.
                head.forget_old_dead_nodes();
                let pending: Vec<PlacementGroupId> = head
                    .groups
                    .lock()
                    .iter()
                    .filter(|(_, g)| g.state() == PlacementGroupState::Pending)
                    .map(|(id, _)| *id)
                    .collect();
                for pg_id in pending {
                    head.place_group(pg_id).await;
                }
            }
        })
    }

    /// Marks dead the actors of nodes that are not alive (silent for
    /// `NODE_TIMEOUT`), freeing their names: after a restart nobody else will.
    async fn fail_actors_of_silent_nodes(&self) -> Result<(), HeadError> {
        let silent: Vec<NodeId> = self
            .nodes
            .lock()
            .iter()
            .filter(|(_, r)| r.last_seen.elapsed() >= NODE_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        let (failed, forgotten) = {
            let mut table = self.actors.lock();
            let ActorTable { actors, names, .. } = &mut *table;
            let mut failed = Vec::new();
            for (id, actor) in actors.iter_mut() {
                let Ok(node) = NodeId::from_bytes(&actor.node_id) else { continue };
                if actor.state() == ActorState::Dead || !silent.contains(&node) {
                    continue;
                }
                actor.set_state(ActorState::Dead);
                actor.death_cause = format!(
                    "The actor {} died because its node {} did not come back after the head restarted",
                    actor.class_name,
                    node.short()
                );
                let key = (actor.namespace.clone(), actor.name.clone());
                if names.get(&key) == Some(id) {
                    names.remove(&key);
                }
                failed.push(actor.clone());
            }
            let mut forgotten = Vec::new();
            for actor in &failed {
                if let Ok(id) = ActorId::from_bytes(&actor.actor_id) {
                    forgotten.extend(table.note_dead(id, self.dead_actors));
                }
            }
            (failed, forgotten)
        };
        // Written after the table's lock is released: a commit may wait on the disk.
        for actor in failed {
            self.persist_actor(actor).await?;
        }
        self.forget(Vec::new(), forgotten);
        Ok(())
    }

    async fn agent(&self, address: &str) -> Result<BundleClient, ClientError> {
        let token = self.token.lock().clone();
        self.channels.bundles(address, &token).await
    }

    fn address_of(&self, node_id: &[u8]) -> Result<String, String> {
        self.nodes()
            .into_iter()
            .find(|n| n.node_id == node_id)
            .map(|n| n.address)
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

    /// Each node's latest sample.
    pub fn latest_samples(&self) -> HashMap<Vec<u8>, NodeStats> {
        self.nodes
            .lock()
            .values()
            .filter_map(|r| r.samples.back().map(|s| (r.info.node_id.clone(), s.clone())))
            .collect()
    }

    /// Each node with its samples taken after `since_ms` (within the window).
    pub fn node_samples(&self, since_ms: u64) -> Vec<(NodeInfo, Vec<NodeStats>)> {
        let infos = self.nodes();
        let nodes = self.nodes.lock();
        infos
            .into_iter()
            .map(|info| {
                let samples = NodeId::from_bytes(&info.node_id)
                    .ok()
                    .and_then(|id| nodes.get(&id))
                    .map(|r| r.samples.iter().filter(|s| s.time_ms > since_ms).cloned().collect())
                    .unwrap_or_default();
                (info, samples)
            })
            .collect()
    }

    /// The cluster's Train runs.
    pub fn train_runs(&self) -> &TrainRuns {
        &self.train_runs
    }

    /// The cluster's Data executions.
    pub fn datasets(&self) -> &Datasets {
        &self.datasets
    }

    /// Every actor the head knows, the last `history` dead ones included.
    pub fn actors(&self) -> Vec<ActorInfo> {
        self.actors.lock().actors.values().cloned().collect()
    }

    /// Every placement group the head knows, the last `history` removed ones included.
    pub fn placement_groups(&self) -> Vec<PlacementGroupInfo> {
        self.groups.lock().values().cloned().collect()
    }

    /// Tries to reserve a pending group's bundles: all of them, on the nodes
    /// its strategy allows, or none.
    async fn place_group(&self, pg_id: PlacementGroupId) {
        let _one_at_a_time = self.placing.lock().await;
        let Some(spec) = self
            .groups
            .lock()
            .get(&pg_id)
            .filter(|g| g.state() == PlacementGroupState::Pending)
            .and_then(|g| g.spec.clone())
        else {
            return;
        };
        let Ok(strategy) = Strategy::from_proto(spec.strategy()) else { return };
        let bundles: Vec<ResourceSet> =
            spec.bundles.iter().map(|b| ResourceSet::from_map(&b.resources).unwrap_or_default()).collect();
        let live = self.placeable_nodes();
        let free: Vec<ResourceSet> =
            live.iter().map(|n| ResourceSet::from_map(&n.available).unwrap_or_default()).collect();
        // Checked when the group was created: a selector that does not parse matches no node.
        let selectors: Vec<Option<LabelSelector>> =
            spec.bundles.iter().map(|b| LabelSelector::parse(&b.label_selector).ok()).collect();
        let allowed = |b: usize, n: usize| selectors[b].as_ref().is_some_and(|s| s.matches(&live[n].labels));
        let labels: Vec<&HashMap<String, String>> = live.iter().map(|n| &n.labels).collect();
        let Some(assignment) = plan_in_domains(&spec.pack_label, &labels, |in_domain| {
            plan(strategy, &bundles, &free, &|b, n| in_domain(n) && allowed(b, n))
        }) else {
            return;
        };
        let mut by_node: Vec<(usize, Vec<BundleSlot>)> = Vec::new();
        for (index, node) in assignment.iter().enumerate() {
            let slot = BundleSlot { index: index as u32, resources: spec.bundles[index].resources.clone() };
            match by_node.iter_mut().find(|(n, _)| n == node) {
                Some((_, slots)) => slots.push(slot),
                None => by_node.push((*node, vec![slot])),
            }
        }
        // Two phases, as in Ray: reserve on every chosen node, then commit on every one. Reserved
        // bundles run nothing, so a group given up because one node refused its share (or is
        // gone without the head knowing yet) has started nothing anywhere.
        let mut reserved: Vec<&str> = Vec::new();
        for (node, slots) in &by_node {
            let address = &live[*node].address;
            let request = ReserveBundlesRequest { pg_id: pg_id.to_vec(), bundles: slots.clone() };
            let outcome = match self.agent(address).await {
                Ok(mut agent) => agent.reserve_bundles(bundle_call(request)).await.map(drop),
                Err(e) => Err(Status::unavailable(e.to_string())),
            };
            if let Err(status) = outcome {
                // Refused for room (its view here was stale) or not reached at all.
                if status.code() != Code::FailedPrecondition {
                    self.mark_unreachable(&live[*node].node_id);
                }
                self.give_back_bundles(pg_id, &reserved).await;
                return;
            }
            reserved.push(address);
        }
        for address in &reserved {
            let request = PlacementGroupRequest { pg_id: pg_id.to_vec(), ..Default::default() };
            let committed = match self.agent(address).await {
                Ok(mut agent) => agent.commit_bundles(bundle_call(request)).await.is_ok(),
                Err(_) => false,
            };
            if !committed {
                // A node lost between the phases: the others' bundles go back, with what started in them.
                self.give_back_bundles(pg_id, &reserved).await;
                return;
            }
        }
        let pg_hex = pg_id.hex();
        {
            let mut nodes = self.nodes.lock();
            for (node, slots) in &by_node {
                let Ok(node_id) = NodeId::from_bytes(&live[*node].node_id) else { continue };
                let Some(record) = nodes.get_mut(&node_id) else { continue };
                let mut total = ResourceSet::from_map(&record.info.total).unwrap_or_default();
                let mut available = ResourceSet::from_map(&record.info.available).unwrap_or_default();
                for slot in slots {
                    let bundle = ResourceSet::from_map(&slot.resources).unwrap_or_default();
                    hold_bundle(&mut total, &mut available, &pg_hex, slot.index, &bundle);
                }
                record.info.total = total.to_map();
                record.info.available = available.to_map();
            }
        }
        if let Some(group) = self.groups.lock().get_mut(&pg_id) {
            group.set_state(PlacementGroupState::Created);
            group.bundle_nodes = assignment.iter().map(|i| live[*i].node_id.clone()).collect();
        }
        self.changes.send_modify(|n| *n += 1);
    }

    /// Live nodes whose agent the head could reach since their last beat: where groups may go.
    fn placeable_nodes(&self) -> Vec<NodeInfo> {
        self.listed(|r| !r.unreachable).into_iter().filter(|n| n.alive).collect()
    }

    fn mark_unreachable(&self, node_id: &[u8]) {
        let Ok(node_id) = NodeId::from_bytes(node_id) else { return };
        if let Some(record) = self.nodes.lock().get_mut(&node_id) {
            record.unreachable = true;
        }
    }

    /// Returns a group's bundles on the agents at `addresses` (reserved or committed).
    async fn give_back_bundles(&self, pg_id: PlacementGroupId, addresses: &[&str]) {
        for address in addresses {
            if let Ok(mut agent) = self.agent(address).await {
                let request = PlacementGroupRequest { pg_id: pg_id.to_vec(), ..Default::default() };
                let _ = agent.return_bundles(bundle_call(request)).await;
            }
        }
    }

    /// Creates a placement group from within the head (a job's entrypoint
    /// resources): placed now if it fits, else by the placement loop once it does.
    pub async fn create_group(&self, spec: PlacementGroupSpec) -> Result<(), Status> {
        self.create_placement_group(Request::new(spec)).await.map(drop)
    }

    /// Removes a group made by [`Head::create_group`], giving back its bundles.
    pub async fn remove_group(&self, pg_id: PlacementGroupId) {
        let request = PlacementGroupRequest { pg_id: pg_id.to_vec(), ..Default::default() };
        if let Err(e) = self.remove_placement_group(Request::new(request)).await {
            tracing::debug!("removing placement group {}: {e}", pg_id.hex());
        }
    }

    /// Takes over a group a previous head placed, whose bundles `node`'s agent
    /// still holds: recorded as placed there, so removing it gives them back.
    pub fn adopt_group(&self, spec: PlacementGroupSpec, node: Vec<u8>) {
        let Ok(pg_id) = PlacementGroupId::from_bytes(&spec.pg_id) else { return };
        let bundle_nodes = vec![node; spec.bundles.len()];
        let info = PlacementGroupInfo { spec: Some(spec), state: PlacementGroupState::Created as i32, bundle_nodes };
        self.groups.lock().insert(pg_id, info);
    }

    /// The nodes a placed group's bundles are on, by bundle.
    pub fn group_nodes(&self, pg_id: PlacementGroupId) -> Vec<Vec<u8>> {
        self.groups.lock().get(&pg_id).map(|g| g.bundle_nodes.clone()).unwrap_or_default()
    }

    /// The state of a placement group (`None` when unknown).
    pub fn group_state(&self, pg_id: PlacementGroupId) -> Option<PlacementGroupState> {
        self.groups.lock().get(&pg_id).map(|g| g.state())
    }

    /// Every driver the head knows of, running ones with `end_time_ms` 0. A
    /// driver whose node is dead counts as ended.
    pub fn drivers(&self) -> Vec<DriverRecord> {
        let alive: std::collections::HashSet<Vec<u8>> =
            self.nodes().into_iter().filter(|n| n.alive).map(|n| n.node_id).collect();
        let mut out: Vec<DriverRecord> = self.drivers.lock().by_job.values().cloned().collect();
        for driver in &mut out {
            if driver.end_time_ms == 0 && !alive.contains(&driver.node_id) {
                driver.end_time_ms = now_ms();
            }
        }
        out.sort_by_key(|d| d.start_time_ms);
        out
    }

    /// Changes when a group is placed or a node registers.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// What an autoscaler needs (Ray's `/api/cluster_status` `loadMetricsReport`):
    /// the work waiting for resources on live nodes, summed by shape
    /// (`resourceDemand`), the placement groups not yet placed (`pgDemand`), the
    /// cluster's use (`usage`) and each live node's resources and idle time (`nodes`).
    pub fn load_metrics_report(&self) -> serde_json::Value {
        use serde_json::json;
        // Read before the node table's lock (never both at once). A node hosting a live actor is busy even when the actor holds no resources (0-CPU actors).
        let hosting: std::collections::HashSet<Vec<u8>> = self
            .actors
            .lock()
            .actors
            .values()
            .filter(|a| a.state != ActorState::Dead as i32)
            .map(|a| a.node_id.clone())
            .collect();
        let nodes = self.nodes.lock();
        let live: Vec<&NodeRecord> = nodes.values().filter(|r| r.last_seen.elapsed() < NODE_TIMEOUT).collect();
        let mut demand: Vec<(std::collections::BTreeMap<String, f64>, u64)> = Vec::new();
        for record in &live {
            for d in &record.demand {
                let shape: std::collections::BTreeMap<String, f64> = d.shape.clone().into_iter().collect();
                match demand.iter_mut().find(|(s, _)| *s == shape) {
                    Some((_, n)) => *n += u64::from(d.count),
                    None => demand.push((shape, u64::from(d.count))),
                }
            }
        }
        let mut usage: std::collections::BTreeMap<String, (f64, f64)> = std::collections::BTreeMap::new();
        let mut node_rows = Vec::new();
        for record in &live {
            for (name, total) in &record.info.total {
                let available = record.info.available.get(name).copied().unwrap_or(0.0);
                let entry = usage.entry(name.clone()).or_default();
                entry.0 += total - available;
                entry.1 += total;
            }
            let sorted = |m: &HashMap<String, f64>| {
                m.iter().map(|(k, v)| (k.clone(), *v)).collect::<std::collections::BTreeMap<_, _>>()
            };
            node_rows.push(json!({
                "nodeId": hex::encode(&record.info.node_id),
                "nodeIp": record.info.ip,
                "isHead": record.info.is_head,
                "resourcesTotal": sorted(&record.info.total),
                "resourcesAvailable": sorted(&record.info.available),
                "idleDurationMs": if hosting.contains(&record.info.node_id) {
                    0
                } else {
                    record.idle_since.map_or(0, |s| s.elapsed().as_millis() as u64)
                },
                "labels": record.info.labels,
            }));
        }
        drop(nodes);
        let pg_demand: Vec<serde_json::Value> = self
            .groups
            .lock()
            .values()
            .filter(|g| g.state() == PlacementGroupState::Pending)
            .filter_map(|g| g.spec.as_ref())
            .map(|spec| {
                let bundles: Vec<std::collections::BTreeMap<String, f64>> =
                    spec.bundles.iter().map(|b| b.resources.clone().into_iter().collect()).collect();
                let strategy = Strategy::from_proto(spec.strategy()).map_or("PACK", Strategy::as_str);
                json!({"strategy": strategy, "bundles": bundles})
            })
            .collect();
        json!({
            "usage": usage.into_iter().map(|(k, (used, total))| (k, json!([used, total]))).collect::<serde_json::Map<_, _>>(),
            "resourceDemand": demand.into_iter().map(|(shape, n)| json!([shape, n])).collect::<Vec<_>>(),
            "pgDemand": pg_demand,
            "nodes": node_rows,
        })
    }

    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.listed(|_| true)
    }

    /// The nodes whose record passes `keep`, in `nodes()`'s order.
    fn listed(&self, keep: impl Fn(&NodeRecord) -> bool) -> Vec<NodeInfo> {
        let nodes = self.nodes.lock();
        let mut out: Vec<NodeInfo> = nodes
            .values()
            .filter(|r| keep(r))
            .map(|r| {
                let mut info = r.info.clone();
                info.alive = r.last_seen.elapsed() < NODE_TIMEOUT;
                info
            })
            .collect();
        // The live head first: after a restart the dead nodes of an earlier run are still listed,
        // and `nodes()[0]` (a joining driver's node, Ray users' habit) must be the head that runs.
        out.sort_by_key(|n| (!n.alive, !n.is_head, n.start_time_ms));
        out
    }
}

/// Milliseconds since the epoch (0 for a clock before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The head's own node agent runs in its process, so a head node on record is an
/// earlier run of this one: the actors it hosted went with it. They are marked
/// dead (their owners, if elsewhere, may still restart them), so callers get
/// `ActorDiedError` instead of waiting on a node that is gone.
fn fail_actors_of_previous_head(
    store: &HeadStore,
    nodes: &[NodeInfo],
    actors: &mut [ActorInfo],
) -> Result<(), HeadError> {
    let old_heads: Vec<&[u8]> = nodes.iter().filter(|n| n.is_head).map(|n| n.node_id.as_slice()).collect();
    for actor in actors.iter_mut() {
        if actor.state() == ActorState::Dead || !old_heads.contains(&actor.node_id.as_slice()) {
            continue;
        }
        let node = NodeId::from_bytes(&actor.node_id)?;
        actor.set_state(ActorState::Dead);
        actor.death_cause = format!(
            "The actor {} died because its node {} (the head node) stopped; the head has restarted since",
            actor.class_name,
            node.short()
        );
        store.put_actor(actor)?;
    }
    Ok(())
}

#[tonic::async_trait]
impl HeadService for Head {
    async fn register_node(&self, request: Request<RegisterNodeRequest>) -> Result<Response<Empty>, Status> {
        let info = request.into_inner().node.ok_or(HeadError::Malformed("RegisterNode needs a node"))?;
        let node_id = NodeId::from_bytes(&info.node_id).map_err(HeadError::from)?;
        self.persist_node(&info)?;
        self.nodes.lock().insert(node_id, NodeRecord::new(info, Instant::now()));
        self.changes.send_modify(|n| *n += 1);
        Ok(Response::new(Empty {}))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<ClusterInfoReply>, Status> {
        let beat = request.into_inner();
        let node_id = NodeId::from_bytes(&beat.node_id).map_err(HeadError::from)?;
        let mut nodes = self.nodes.lock();
        let record = nodes.get_mut(&node_id).ok_or(HeadError::UnknownNode(node_id))?;
        record.info.available = beat.available;
        record.demand = beat.demand;
        if let Some(stats) = beat.stats {
            let oldest = stats.time_ms.saturating_sub(self.metrics_window.0);
            while record.samples.front().is_some_and(|s| s.time_ms < oldest) {
                record.samples.pop_front();
            }
            record.samples.push_back(stats);
        }
        if record.unused() {
            record.idle_since.get_or_insert_with(Instant::now);
        } else {
            record.idle_since = None;
        }
        let revived = record.last_seen.elapsed() >= NODE_TIMEOUT;
        record.last_seen = Instant::now();
        record.unreachable = false;
        drop(nodes);
        if revived {
            // A node back from silence (or known from before a restart): waiters may now fit.
            self.changes.send_modify(|n| *n += 1);
        }
        Ok(Response::new(ClusterInfoReply { nodes: self.nodes(), agent_tables: None }))
    }

    async fn list_nodes(&self, _request: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        Ok(Response::new(ClusterInfoReply { nodes: self.nodes(), agent_tables: None }))
    }

    async fn register_actor(
        &self,
        request: Request<RegisterActorRequest>,
    ) -> Result<Response<RegisterActorReply>, Status> {
        let req = request.into_inner();
        let actor = req.actor.ok_or(HeadError::Malformed("RegisterActor needs an actor"))?;
        let actor_id = ActorId::from_bytes(&actor.actor_id).map_err(HeadError::from)?;
        if !actor.name.is_empty() {
            let mut table = self.actors.lock();
            let key = (actor.namespace.clone(), actor.name.clone());
            if let Some(existing) = table.names.get(&key) {
                if req.get_if_exists {
                    return Ok(Response::new(RegisterActorReply { actor_id: existing.to_vec(), existing: true }));
                }
                return Err(HeadError::NameTaken { name: actor.name, namespace: actor.namespace }.into());
            }
            // The name is taken now; the commit below runs without the table's lock.
            table.names.insert(key, actor_id);
        }
        if let Err(e) = self.persist_actor(actor.clone()).await {
            self.actors.lock().names.retain(|_, id| *id != actor_id);
            return Err(e.into());
        }
        self.actors.lock().actors.insert(actor_id, actor);
        Ok(Response::new(RegisterActorReply { actor_id: actor_id.to_vec(), existing: false }))
    }

    async fn update_actor(&self, request: Request<ActorInfo>) -> Result<Response<Empty>, Status> {
        let mut info = request.into_inner();
        let actor_id = ActorId::from_bytes(&info.actor_id).map_err(HeadError::from)?;
        // An update from an agent that only routes to the actor lacks where it came from.
        if info.job_id.is_empty()
            && let Some(known) = self.actors.lock().actors.get(&actor_id)
        {
            info.job_id.clone_from(&known.job_id);
            info.detached = known.detached;
            if info.resources.is_empty() {
                info.resources.clone_from(&known.resources);
            }
        }
        self.persist_actor(info.clone()).await?;
        let mut table = self.actors.lock();
        let dead = info.state() == ActorState::Dead;
        if !info.name.is_empty() {
            let key = (info.namespace.clone(), info.name.clone());
            if dead {
                if table.names.get(&key) == Some(&actor_id) {
                    table.names.remove(&key);
                }
            } else {
                // Its owner restarted it after the head had given it up for dead
                // (its node went with an earlier head): the name is its again if free.
                table.names.entry(key).or_insert(actor_id);
            }
        }
        if !dead {
            // Alive again: it must not be forgotten as one of the dead.
            table.dead.retain(|d| *d != actor_id);
        }
        table.actors.insert(actor_id, info);
        let forgotten = if dead { table.note_dead(actor_id, self.dead_actors) } else { Vec::new() };
        drop(table);
        self.forget(Vec::new(), forgotten);
        Ok(Response::new(Empty {}))
    }

    async fn get_named_actor(
        &self,
        request: Request<GetNamedActorRequest>,
    ) -> Result<Response<GetNamedActorReply>, Status> {
        let req = request.into_inner();
        let table = self.actors.lock();
        let actor = table.names.get(&(req.namespace, req.name)).and_then(|id| table.actors.get(id)).cloned();
        Ok(Response::new(GetNamedActorReply { found: actor.is_some(), actor }))
    }

    async fn get_actor(&self, request: Request<ActorRequest>) -> Result<Response<GetNamedActorReply>, Status> {
        let id = ActorId::from_bytes(&request.into_inner().actor_id).map_err(HeadError::from)?;
        let actor = self.actors.lock().actors.get(&id).cloned();
        Ok(Response::new(GetNamedActorReply { found: actor.is_some(), actor }))
    }

    async fn list_actors(&self, _request: Request<Empty>) -> Result<Response<ListActorsReply>, Status> {
        let actors = self.actors.lock().actors.values().cloned().collect();
        Ok(Response::new(ListActorsReply { actors }))
    }

    async fn create_placement_group(
        &self,
        request: Request<PlacementGroupSpec>,
    ) -> Result<Response<PlacementGroupInfo>, Status> {
        let spec = request.into_inner();
        Strategy::from_proto(spec.strategy()).map_err(HeadError::from)?;
        let pg_id = PlacementGroupId::from_bytes(&spec.pg_id).map_err(HeadError::from)?;
        if spec.bundles.is_empty() {
            return Err(HeadError::NoBundles.into());
        }
        for (index, bundle) in spec.bundles.iter().enumerate() {
            let resources =
                ResourceSet::from_map(&bundle.resources).map_err(|source| HeadError::BadBundle { index, source })?;
            if resources.is_empty() {
                return Err(HeadError::EmptyBundle(index).into());
            }
            LabelSelector::parse(&bundle.label_selector)
                .map_err(|source| HeadError::BadLabelSelector { index, source })?;
        }
        let info = PlacementGroupInfo {
            spec: Some(spec),
            state: PlacementGroupState::Pending as i32,
            bundle_nodes: Vec::new(),
        };
        self.groups.lock().insert(pg_id, info);
        self.place_group(pg_id).await;
        let info = self.groups.lock().get(&pg_id).cloned().unwrap_or_default();
        Ok(Response::new(info))
    }

    async fn remove_placement_group(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let pg_id = PlacementGroupId::from_bytes(&request.into_inner().pg_id).map_err(HeadError::from)?;
        let _one_at_a_time = self.placing.lock().await;
        let mut nodes = {
            let mut groups = self.groups.lock();
            let Some(group) = groups.get_mut(&pg_id) else {
                return Err(HeadError::UnknownPlacementGroup(pg_id).into());
            };
            group.set_state(PlacementGroupState::Removed);
            let nodes = std::mem::take(&mut group.bundle_nodes);
            let mut removed = self.removed_groups.lock();
            if !removed.contains(&pg_id) {
                removed.push_back(pg_id);
            }
            while removed.len() > self.history.0 {
                if let Some(old) = removed.pop_front() {
                    groups.remove(&old);
                }
            }
            nodes
        };
        let pg_hex = pg_id.hex();
        nodes.sort();
        nodes.dedup();
        for node in nodes {
            let Ok(node) = NodeId::from_bytes(&node) else { continue };
            let address = self.nodes.lock().get(&node).map(|r| r.info.address.clone());
            if let Some(address) = address {
                self.give_back_bundles(pg_id, &[&address]).await;
            }
            if let Some(record) = self.nodes.lock().get_mut(&node) {
                record.info.total.retain(|k, _| !k.ends_with(&pg_hex));
            }
        }
        Ok(Response::new(Empty {}))
    }

    async fn get_placement_group(
        &self,
        request: Request<PlacementGroupRequest>,
    ) -> Result<Response<PlacementGroupReply>, Status> {
        let req = request.into_inner();
        let by_id = if req.pg_id.is_empty() {
            None
        } else {
            Some(PlacementGroupId::from_bytes(&req.pg_id).map_err(HeadError::from)?)
        };
        let groups = self.groups.lock();
        let found = if let Some(pg_id) = by_id {
            groups.get(&pg_id).cloned()
        } else {
            groups
                .values()
                .find(|g| {
                    g.state() != PlacementGroupState::Removed
                        && g.spec.as_ref().is_some_and(|s| s.name == req.name && s.namespace == req.namespace)
                })
                .cloned()
        };
        Ok(Response::new(PlacementGroupReply { found: found.is_some(), info: found }))
    }

    async fn list_placement_groups(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<ListPlacementGroupsReply>, Status> {
        Ok(Response::new(ListPlacementGroupsReply { groups: self.groups.lock().values().cloned().collect() }))
    }

    async fn update_train_run(&self, request: Request<TrainRunUpdate>) -> Result<Response<Empty>, Status> {
        let update = request.into_inner();
        self.train_runs
            .update(&update.run_id, &update.run_json, &update.new_reports_json)
            .await
            .map_err(Status::invalid_argument)?;
        Ok(Response::new(Empty {}))
    }

    async fn update_dataset(&self, request: Request<DatasetUpdate>) -> Result<Response<Empty>, Status> {
        let update = request.into_inner();
        self.datasets.update(&update.dataset_id, &update.dataset_json).map_err(Status::invalid_argument)?;
        Ok(Response::new(Empty {}))
    }

    async fn update_driver(&self, request: Request<DriverRecord>) -> Result<Response<Empty>, Status> {
        let driver = request.into_inner();
        if driver.job_id.len() != 4 {
            return Err(HeadError::Malformed("UpdateDriver needs a 4-byte job id").into());
        }
        let mut table = self.drivers.lock();
        let job = driver.job_id.clone();
        let ended = driver.end_time_ms != 0;
        table.by_job.insert(job.clone(), driver);
        if ended && !table.ended.contains(&job) {
            table.ended.push_back(job);
            while table.ended.len() > self.history.0 {
                if let Some(old) = table.ended.pop_front() {
                    table.by_job.remove(&old);
                }
            }
        }
        Ok(Response::new(Empty {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_load_report_sums_demand_by_shape_and_tracks_idle_nodes() {
        let head = Head::default();
        let cpus = |n: f64| HashMap::from([("CPU".to_string(), n)]);
        for (id, ip) in [(1u8, "10.0.0.1"), (2, "10.0.0.2")] {
            let info = NodeInfo {
                node_id: vec![id; 16],
                ip: ip.into(),
                total: cpus(2.0),
                available: cpus(2.0),
                ..Default::default()
            };
            head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
        }
        let demand = |n| vec![ResourceDemand { shape: cpus(4.0), count: n }];
        // Node 1 is busy (1 of 2 CPUs in use) and queues 2 tasks; node 2 is idle and queues 3.
        let busy = HeartbeatRequest { node_id: vec![1; 16], available: cpus(1.0), stats: None, demand: demand(2) };
        let idle = HeartbeatRequest { node_id: vec![2; 16], available: cpus(2.0), stats: None, demand: demand(3) };
        head.heartbeat(Request::new(busy)).await.unwrap();
        head.heartbeat(Request::new(idle)).await.unwrap();
        let report = head.load_metrics_report();
        assert_eq!(report["resourceDemand"], serde_json::json!([[{"CPU": 4.0}, 5]]));
        assert_eq!(report["usage"]["CPU"], serde_json::json!([1.0, 4.0]));
        let nodes = report["nodes"].as_array().unwrap();
        let by_ip = |ip: &str| nodes.iter().find(|n| n["nodeIp"] == ip).unwrap().clone();
        assert_eq!(by_ip("10.0.0.1")["idleDurationMs"], 0, "a node with resources in use is not idle");
        assert_eq!(by_ip("10.0.0.2")["resourcesAvailable"], serde_json::json!({"CPU": 2.0}));

        // An actor holding no resources still keeps its node from counting as idle.
        let actor = ActorInfo {
            actor_id: vec![7; 16],
            node_id: vec![2; 16],
            state: ActorState::Alive as i32,
            ..Default::default()
        };
        head.actors.lock().actors.insert(ActorId::from_bytes(&[7; 16]).unwrap(), actor);
        let report = head.load_metrics_report();
        let hosting = report["nodes"].as_array().unwrap().iter().find(|n| n["nodeIp"] == "10.0.0.2").unwrap().clone();
        assert_eq!(hosting["idleDurationMs"], 0);
        head.actors.lock().actors.clear();

        // So does an object in its store (there is no lineage to make it again).
        let stats = NodeStats { store_objects: 1, ..Default::default() };
        let holding =
            HeartbeatRequest { node_id: vec![2; 16], available: cpus(2.0), stats: Some(stats), demand: vec![] };
        head.heartbeat(Request::new(holding)).await.unwrap();
        assert!(head.nodes.lock()[&NodeId::from_bytes(&[2; 16]).unwrap()].idle_since.is_none());

        // A pending placement group is demand too.
        let bundle = oxray_proto::Bundle { resources: cpus(8.0), ..Default::default() };
        let spec = PlacementGroupSpec {
            pg_id: vec![5; 16],
            bundles: vec![bundle],
            strategy: oxray_proto::PlacementStrategy::StrictPack as i32,
            ..Default::default()
        };
        head.create_placement_group(Request::new(spec)).await.unwrap();
        let report = head.load_metrics_report();
        assert_eq!(report["pgDemand"], serde_json::json!([{"strategy": "STRICT_PACK", "bundles": [{"CPU": 8.0}]}]));
    }

    /// A node agent's bundle service that logs the calls it gets, as (node, call).
    #[derive(Clone)]
    struct LoggingBundles {
        node: u8,
        log: Arc<Mutex<Vec<(u8, &'static str)>>>,
    }

    #[tonic::async_trait]
    impl oxray_proto::bundle_service_server::BundleService for LoggingBundles {
        async fn reserve_bundles(&self, _: Request<ReserveBundlesRequest>) -> Result<Response<Empty>, Status> {
            self.log.lock().push((self.node, "reserve"));
            Ok(Response::new(Empty {}))
        }
        async fn commit_bundles(&self, _: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
            self.log.lock().push((self.node, "commit"));
            Ok(Response::new(Empty {}))
        }
        async fn return_bundles(&self, _: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
            self.log.lock().push((self.node, "return"));
            Ok(Response::new(Empty {}))
        }
    }

    /// Serves `bundles` on a free local port; returns its address.
    async fn serve_bundles(bundles: LoggingBundles) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let service = oxray_proto::bundle_service_server::BundleServiceServer::new(bundles);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        address
    }

    async fn register(head: &Head, id: u8, address: &str, is_head: bool) {
        let cpus = HashMap::from([("CPU".to_string(), 1.0)]);
        let info = NodeInfo {
            node_id: vec![id; 16],
            address: address.into(),
            is_head,
            total: cpus.clone(),
            available: cpus,
            start_time_ms: u64::from(id),
            ..Default::default()
        };
        head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
    }

    #[tokio::test]
    async fn a_group_is_committed_only_once_every_node_has_reserved_and_a_gone_node_is_skipped() {
        let head = Head::default();
        head.set_token("token");
        let log = Arc::new(Mutex::new(Vec::new()));
        let first = serve_bundles(LoggingBundles { node: 1, log: log.clone() }).await;
        register(&head, 1, &first, true).await;
        // Node 2 was just killed: nothing listens at its address, yet it is not silent for long enough
        // to count as dead (a lent CPU even shows as free in its last beat).
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone_address = gone.local_addr().unwrap().to_string();
        drop(gone);
        register(&head, 2, &gone_address, false).await;
        let bundle = oxray_proto::Bundle { resources: HashMap::from([("CPU".to_string(), 1.0)]), ..Default::default() };
        let pg = PlacementGroupId::from_bytes(&[5; 16]).unwrap();
        let spec = PlacementGroupSpec {
            pg_id: pg.to_vec(),
            bundles: vec![bundle.clone(), bundle],
            strategy: oxray_proto::PlacementStrategy::Spread as i32,
            ..Default::default()
        };
        head.create_placement_group(Request::new(spec)).await.unwrap();
        // Node 1 reserved its bundle, node 2 could not be reached: node 1 gives it back, never
        // having made it usable (a task in it would have run, then been killed).
        assert_eq!(*log.lock(), vec![(1, "reserve"), (1, "return")]);
        assert_eq!(head.group_state(pg), Some(PlacementGroupState::Pending));

        // Node 2 is skipped from now on (until it beats again): with node 3 the group goes on 1 and 3.
        log.lock().clear();
        let third = serve_bundles(LoggingBundles { node: 3, log: log.clone() }).await;
        register(&head, 3, &third, false).await;
        head.place_group(pg).await;
        assert_eq!(*log.lock(), vec![(1, "reserve"), (3, "reserve"), (1, "commit"), (3, "commit")]);
        assert_eq!(head.group_state(pg), Some(PlacementGroupState::Created));
        assert_eq!(head.group_nodes(pg), vec![vec![1; 16], vec![3; 16]]);

        // A beat makes node 2 a candidate again.
        assert!(!head.placeable_nodes().iter().any(|n| n.node_id == [2; 16]));
        let beat = HeartbeatRequest { node_id: vec![2; 16], available: HashMap::new(), stats: None, demand: vec![] };
        head.heartbeat(Request::new(beat)).await.unwrap();
        assert!(head.placeable_nodes().iter().any(|n| n.node_id == [2; 16]));
    }

    #[tokio::test]
    async fn heartbeats_update_and_unknown_nodes_are_refused() {
        let head = Head::default();
        let beat = HeartbeatRequest { node_id: vec![1; 16], available: HashMap::new(), stats: None, demand: vec![] };
        assert_eq!(head.heartbeat(Request::new(beat.clone())).await.unwrap_err().code(), Code::NotFound);
        let info = NodeInfo { node_id: vec![1; 16], is_head: true, ..Default::default() };
        head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
        let mut beat = beat;
        beat.available.insert("CPU".into(), 1.5);
        head.heartbeat(Request::new(beat)).await.unwrap();
        let nodes = head.nodes();
        assert_eq!(nodes.len(), 1);
        assert!(nodes[0].alive);
        assert_eq!(nodes[0].available["CPU"], 1.5);
    }

    #[tokio::test]
    async fn a_restarted_head_fails_the_actors_of_its_previous_head_node() {
        let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
        {
            let head = Head::persistent(&dir).unwrap();
            for (id, is_head) in [(7u8, true), (8, false)] {
                let info = NodeInfo { node_id: vec![id; 16], is_head, ..Default::default() };
                head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
            }
            for (id, name, node) in [(1u8, "on_head", 7u8), (2, "elsewhere", 8)] {
                let register = RegisterActorRequest { actor: Some(named(id, name)), get_if_exists: false };
                head.register_actor(Request::new(register)).await.unwrap();
                let mut alive = ActorInfo { node_id: vec![node; 16], ..named(id, name) };
                alive.set_state(ActorState::Alive);
                head.update_actor(Request::new(alive)).await.unwrap();
            }
        }
        let head = Head::persistent(&dir).unwrap();
        let lookup = |name: &str| GetNamedActorRequest { name: name.into(), namespace: "ns".into() };
        let gone = head.get_named_actor(Request::new(lookup("on_head"))).await.unwrap().into_inner();
        assert!(!gone.found, "its name is free");
        let dead = head.get_actor(Request::new(ActorRequest { actor_id: vec![1; 16], ..Default::default() }));
        let dead = dead.await.unwrap().into_inner().actor.unwrap();
        assert_eq!(dead.state(), ActorState::Dead);
        assert!(dead.death_cause.contains("07070707") && dead.death_cause.contains("head"), "{}", dead.death_cause);
        let kept = head.get_named_actor(Request::new(lookup("elsewhere"))).await.unwrap().into_inner();
        assert_eq!(kept.actor.unwrap().state(), ActorState::Alive, "its node may still beat again");
        // Its owner may restart it elsewhere: then the name is its again.
        let mut restarted = ActorInfo { node_id: vec![8; 16], ..named(1, "on_head") };
        restarted.set_state(ActorState::Alive);
        head.update_actor(Request::new(restarted)).await.unwrap();
        assert!(head.get_named_actor(Request::new(lookup("on_head"))).await.unwrap().into_inner().found);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_restarted_head_fails_the_actors_of_nodes_that_do_not_come_back() {
        let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
        {
            let head = Head::persistent(&dir).unwrap();
            for node in [8u8, 9] {
                let info = NodeInfo { node_id: vec![node; 16], ..Default::default() };
                head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
                let name = format!("on{node}");
                let register = RegisterActorRequest { actor: Some(named(node, &name)), get_if_exists: false };
                head.register_actor(Request::new(register)).await.unwrap();
                let mut alive = ActorInfo { node_id: vec![node; 16], ..named(node, &name) };
                alive.set_state(ActorState::Alive);
                head.update_actor(Request::new(alive)).await.unwrap();
            }
        }
        let head = Head::persistent(&dir).unwrap();
        let beat = HeadHeartbeat { node_id: vec![9; 16], available: HashMap::new(), stats: None, demand: vec![] };
        head.heartbeat(Request::new(beat)).await.unwrap();
        head.fail_actors_of_silent_nodes().await.unwrap();
        let lookup = |name: &str| GetNamedActorRequest { name: name.into(), namespace: "ns".into() };
        assert!(!head.get_named_actor(Request::new(lookup("on8"))).await.unwrap().into_inner().found);
        let kept = head.get_named_actor(Request::new(lookup("on9"))).await.unwrap().into_inner();
        assert_eq!(kept.actor.unwrap().state(), ActorState::Alive, "its node beat again");
        drop(head);
        let again = Head::persistent(&dir).unwrap();
        let dead = again.get_actor(Request::new(ActorRequest { actor_id: vec![8; 16], ..Default::default() }));
        let dead = dead.await.unwrap().into_inner().actor.unwrap();
        assert_eq!(dead.state(), ActorState::Dead, "recorded");
        assert!(dead.death_cause.contains("08080808"), "{}", dead.death_cause);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_restarted_head_keeps_its_actors_and_nodes() {
        let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
        {
            let head = Head::persistent(&dir).unwrap();
            let info = NodeInfo { node_id: vec![7; 16], address: "127.0.0.1:9".into(), ..Default::default() };
            head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
            let register = RegisterActorRequest { actor: Some(named(1, "kept")), get_if_exists: false };
            head.register_actor(Request::new(register)).await.unwrap();
            let mut alive = named(1, "kept");
            alive.set_state(ActorState::Alive);
            head.update_actor(Request::new(alive)).await.unwrap();
        }
        let head = Head::persistent(&dir).unwrap();
        let lookup = GetNamedActorRequest { name: "kept".into(), namespace: "ns".into() };
        let found = head.get_named_actor(Request::new(lookup)).await.unwrap().into_inner();
        assert_eq!(found.actor.unwrap().state(), ActorState::Alive);
        let nodes = head.nodes();
        assert_eq!(nodes.len(), 1);
        assert!(!nodes[0].alive, "a node is dead until it beats again");
        let beat = HeadHeartbeat { node_id: vec![7; 16], available: HashMap::new(), stats: None, demand: vec![] };
        head.heartbeat(Request::new(beat)).await.unwrap();
        assert!(head.nodes()[0].alive);
        let dup = RegisterActorRequest { actor: Some(named(2, "kept")), get_if_exists: false };
        assert_eq!(head.register_actor(Request::new(dup)).await.unwrap_err().code(), Code::AlreadyExists);
        let _ = std::fs::remove_dir_all(dir);
    }

    use oxray_proto::HeartbeatRequest as HeadHeartbeat;

    #[tokio::test]
    async fn the_live_head_is_listed_before_the_nodes_of_an_earlier_run() {
        let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
        let head_node = |id: u8, start_time_ms: u64| NodeInfo {
            node_id: vec![id; 16],
            address: format!("127.0.0.1:{id}"),
            is_head: true,
            start_time_ms,
            ..Default::default()
        };
        {
            let head = Head::persistent(&dir).unwrap();
            head.register_node(Request::new(RegisterNodeRequest { node: Some(head_node(1, 100)) })).await.unwrap();
        }
        let head = Head::persistent(&dir).unwrap();
        head.register_node(Request::new(RegisterNodeRequest { node: Some(head_node(2, 200)) })).await.unwrap();
        let nodes = head.nodes();
        assert_eq!(nodes.len(), 2, "the earlier run's head is still listed, as dead");
        assert_eq!((nodes[0].node_id.clone(), nodes[0].alive), (vec![2; 16], true));
        assert_eq!((nodes[1].node_id.clone(), nodes[1].alive), (vec![1; 16], false));
        let _ = std::fs::remove_dir_all(dir);
    }

    fn named(id: u8, name: &str) -> ActorInfo {
        ActorInfo {
            actor_id: vec![id; 16],
            name: name.into(),
            namespace: "ns".into(),
            state: ActorState::PendingCreation as i32,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn actor_names_are_unique_until_the_actor_dies() {
        let head = Head::default();
        let register = |info, get_if_exists| RegisterActorRequest { actor: Some(info), get_if_exists };
        head.register_actor(Request::new(register(named(1, "a"), false))).await.unwrap();
        let dup = head.register_actor(Request::new(register(named(2, "a"), false))).await.unwrap_err();
        assert_eq!(dup.code(), Code::AlreadyExists);
        assert!(dup.message().contains("\"a\""), "{}", dup.message());
        let reuse = head.register_actor(Request::new(register(named(3, "a"), true))).await.unwrap().into_inner();
        assert_eq!((reuse.actor_id, reuse.existing), (vec![1; 16], true));
        let lookup = GetNamedActorRequest { name: "a".into(), namespace: "ns".into() };
        assert!(head.get_named_actor(Request::new(lookup.clone())).await.unwrap().into_inner().found);
        let mut dead = named(1, "a");
        dead.set_state(ActorState::Dead);
        head.update_actor(Request::new(dead)).await.unwrap();
        assert!(!head.get_named_actor(Request::new(lookup)).await.unwrap().into_inner().found);
        head.register_actor(Request::new(register(named(4, "a"), false))).await.unwrap();
        assert_eq!(head.list_actors(Request::new(Empty {})).await.unwrap().into_inner().actors.len(), 2);
    }

    fn dead(id: u8) -> ActorInfo {
        let mut info = named(id, &format!("a{id}"));
        info.set_state(ActorState::Dead);
        info
    }

    #[tokio::test]
    async fn only_the_last_dead_actors_are_kept_in_memory_and_in_redb() {
        let dir = std::env::temp_dir().join(format!("oxray-head-history-{}", rand::random::<u64>()));
        {
            let head = Head { dead_actors: History(3), ..Head::persistent(&dir).unwrap() };
            let alive = RegisterActorRequest { actor: Some(named(100, "alive")), get_if_exists: false };
            head.register_actor(Request::new(alive)).await.unwrap();
            for id in 1..=10 {
                let register = RegisterActorRequest { actor: Some(named(id, &format!("a{id}"))), get_if_exists: false };
                head.register_actor(Request::new(register)).await.unwrap();
                head.update_actor(Request::new(dead(id))).await.unwrap();
            }
            let mut ids: Vec<u8> = head
                .list_actors(Request::new(Empty {}))
                .await
                .unwrap()
                .into_inner()
                .actors
                .iter()
                .map(|a| a.actor_id[0])
                .collect();
            ids.sort();
            assert_eq!(ids, [8, 9, 10, 100], "the live actor and the three latest dead ones");
        }
        let reloaded = Head::persistent(&dir).unwrap();
        assert_eq!(reloaded.actors.lock().actors.len(), 4, "forgotten rows are gone from redb too");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn only_the_last_dead_nodes_are_kept() {
        let dir = std::env::temp_dir().join(format!("oxray-head-nodes-{}", rand::random::<u64>()));
        {
            let head = Head { history: History(3), ..Head::persistent(&dir).unwrap() };
            for id in 1..=10u8 {
                let info = NodeInfo { node_id: vec![id; 16], ..Default::default() };
                head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
            }
            // Nodes 1..=9 went silent long ago, node 9 last.
            for (id, record) in head.nodes.lock().iter_mut() {
                let id = id.to_vec()[0];
                if id != 10 {
                    record.last_seen = Instant::now() - NODE_TIMEOUT - Duration::from_secs(100 - id as u64);
                }
            }
            let beat =
                HeartbeatRequest { node_id: vec![10; 16], available: HashMap::new(), stats: None, demand: vec![] };
            head.heartbeat(Request::new(beat)).await.unwrap();
            head.forget_old_dead_nodes();
            let mut ids: Vec<u8> = head.nodes().iter().map(|n| n.node_id[0]).collect();
            ids.sort();
            assert_eq!(ids, [7, 8, 9, 10], "the live node and the three most recently dead");
        }
        let reloaded = Head::persistent(&dir).unwrap();
        assert_eq!(reloaded.nodes().len(), 4, "forgotten rows are gone from redb too");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn an_actor_alive_again_is_not_forgotten_with_the_dead() {
        let head = Head { dead_actors: History(1), ..Head::default() };
        let update = |id: u8, state: ActorState| {
            let mut info = named(id, &format!("a{id}"));
            info.set_state(state);
            head.update_actor(Request::new(info))
        };
        update(1, ActorState::Dead).await.unwrap();
        // Given up for dead (its node went with an earlier head), then restarted by its owner.
        update(1, ActorState::Alive).await.unwrap();
        update(2, ActorState::Dead).await.unwrap();
        update(3, ActorState::Dead).await.unwrap();
        let kept = head.get_actor(Request::new(ActorRequest { actor_id: vec![1; 16], ..Default::default() }));
        let kept = kept.await.unwrap().into_inner();
        assert!(kept.found, "the live actor was forgotten with the dead ones");
        assert_eq!(kept.actor.unwrap().state(), ActorState::Alive);
    }

    #[tokio::test]
    async fn only_the_last_removed_placement_groups_are_kept() {
        let head = Head { history: History(3), ..Head::default() };
        for id in 1..=10u8 {
            let bundle =
                oxray_proto::Bundle { resources: HashMap::from([("CPU".to_string(), 1.0)]), ..Default::default() };
            let spec = PlacementGroupSpec {
                pg_id: vec![id; 16],
                bundles: vec![bundle],
                strategy: oxray_proto::PlacementStrategy::Pack as i32,
                ..Default::default()
            };
            head.create_placement_group(Request::new(spec)).await.unwrap();
            let remove = PlacementGroupRequest { pg_id: vec![id; 16], ..Default::default() };
            head.remove_placement_group(Request::new(remove)).await.unwrap();
        }
        let groups = head.list_placement_groups(Request::new(Empty {})).await.unwrap().into_inner().groups;
        let mut ids: Vec<u8> = groups.iter().map(|g| g.spec.as_ref().unwrap().pg_id[0]).collect();
        ids.sort();
        assert_eq!(ids, [8, 9, 10]);
    }

    #[tokio::test]
    async fn drivers_are_listed_ended_ones_bounded_and_those_of_dead_nodes_ended() {
        let head = Head { history: History(2), ..Head::default() };
        let node = NodeInfo { node_id: vec![1; 16], ..Default::default() };
        head.register_node(Request::new(RegisterNodeRequest { node: Some(node) })).await.unwrap();
        let driver = |job: u8, node: u8, end: u64| DriverRecord {
            job_id: vec![0, 0, 0, job],
            node_id: vec![node; 16],
            start_time_ms: u64::from(job),
            end_time_ms: end,
            ..Default::default()
        };
        for job in 1..=4 {
            head.update_driver(Request::new(driver(job, 1, 0))).await.unwrap();
            head.update_driver(Request::new(driver(job, 1, 100))).await.unwrap();
        }
        head.update_driver(Request::new(driver(5, 1, 0))).await.unwrap();
        head.update_driver(Request::new(driver(6, 9, 0))).await.unwrap();
        let listed: Vec<(u8, bool)> = head.drivers().iter().map(|d| (d.job_id[3], d.end_time_ms == 0)).collect();
        // Two ended drivers kept; the one on an unknown (dead) node counts as ended.
        assert_eq!(listed, [(3, false), (4, false), (5, true), (6, false)]);
        let bad = DriverRecord { job_id: vec![1], ..Default::default() };
        assert!(head.update_driver(Request::new(bad)).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_commit_does_not_hold_up_reads_of_the_actor_table() {
        let dir = std::env::temp_dir().join(format!("oxray-head-slow-{}", rand::random::<u64>()));
        let head = Head::persistent(&dir).unwrap();
        let register = RegisterActorRequest { actor: Some(named(1, "early")), get_if_exists: false };
        head.register_actor(Request::new(register)).await.unwrap();
        let held = head.store.as_ref().unwrap().hold_writes();
        let writer = tokio::spawn({
            let head = head.clone();
            async move {
                let register = RegisterActorRequest { actor: Some(named(2, "late")), get_if_exists: false };
                head.register_actor(Request::new(register)).await.map(|_| ())
            }
        });
        // Wait until the registration is inside its commit (blocked on the held transaction).
        while !writer.is_finished()
            && head.actors.try_lock().is_some_and(|t| !t.names.contains_key(&("ns".into(), "late".into())))
        {
            tokio::task::yield_now().await;
        }
        let lookup = GetNamedActorRequest { name: "early".into(), namespace: "ns".into() };
        let read = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::task::spawn_blocking({
                let head = head.clone();
                move || {
                    let table = head.actors.lock();
                    table.names.contains_key(&(lookup.namespace, lookup.name))
                }
            }),
        )
        .await
        .expect("a read of the actor table waited for another actor's commit");
        assert!(read.unwrap());
        drop(held);
        writer.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
