//! The parts of the node agent's state that involve other nodes: which node
//! runs a task that does not fit here, copies of objects held elsewhere, tasks
//! other nodes forwarded here, and what a node's death fails or retries.

use super::objects::RemoteCopy;
use super::{Action, ActorEntry, ActorState, AgentState, TaskState};
use crate::agent::{AgentError, CopyError};
use crate::errors::{SystemErrorKind, system_error_object};
use crate::ids::{ActorId, JobId, NodeId, ObjectId, TaskId};
use crate::labels::LabelSelector;
use crate::resources::ResourceSet;
use oxray_object_store::ObjectPlace;
use oxray_proto::object_location::Place;
use oxray_proto::task_arg::Kind;
use oxray_proto::{ActorInfo, ArgSource, ForwardTask, NodeInfo, RemoteObject, RemoteTaskDone};
use oxray_proto::{ObjectLocation, TaskKind, TaskSpec};
use std::collections::{HashMap, HashSet};

/// How many node-table updates a forward keeps lowering a peer's reported room.
const RECENT_FORWARD_UPDATES: u64 = 2;

/// Another node, as the head last reported it (available is lowered by what
/// this node forwarded there since).
#[derive(Debug, Clone)]
pub struct PeerView {
    pub address: String,
    pub alive: bool,
    pub total: ResourceSet,
    pub available: ResourceSet,
    /// This node saw it die (its link broke): it stays dead here even while the
    /// head still lists it, so work is not sent to it again, until it comes back: the
    /// head lists it dead, then alive (a host whose network returned).
    pub failed: bool,
    /// Whether the head's last update listed it alive.
    pub head_alive: bool,
    pub labels: HashMap<String, String>,
    /// The node-table update during which this node last forwarded work there.
    pub forwarded_at: Option<u64>,
}

/// The other nodes, as this one knows them.
#[derive(Default)]
pub(super) struct PeerTable {
    /// Each other node as the head last reported it.
    nodes: HashMap<NodeId, PeerView>,
    /// Owner nodes with a link to this one (their tasks are never forwarded again).
    owners: HashSet<NodeId>,
    /// Functions already sent to each node, for each job (the node drops a
    /// job's functions when the job ends there, so another job sends its own).
    sent_functions: HashSet<(NodeId, Vec<u8>, Vec<u8>)>,
    /// Nodes may join this cluster (it was started by `oxray start`, or another
    /// node has joined): a request no live node can meet waits instead of failing.
    may_grow: bool,
    /// The next turn of `SPREAD` placement.
    spread_turn: usize,
    /// How many times the head's node list came in: a task pinned to a node this
    /// node has not heard of waits for the next one before it fails.
    updates: u64,
    /// Tasks pinned to a node not heard of yet, with `updates` when first seen.
    awaiting_node: HashMap<TaskId, u64>,
}

/// Where a ready task may run, by its scheduling strategy.
pub(super) enum Placement {
    /// Here if it fits, else wherever `pick_peer` finds room (the default; `SPREAD`'s
    /// turn was taken when it became ready).
    Anywhere,
    /// Here only: it waits until it fits.
    Here,
    /// On this other node (it waits there until it fits).
    Node(NodeId),
    /// Not yet: it names a node this one has not heard of (the head's next list may have it).
    Wait,
    /// Nowhere: its results become this `TaskUnschedulableError`.
    Fail(String),
}

impl PeerTable {
    /// `job` ended: what was sent for it says nothing about what the other nodes keep now.
    pub(super) fn forget_sent_functions(&mut self, job: &[u8]) {
        self.sent_functions.retain(|(_, _, j)| j.as_slice() != job);
    }

    /// The other nodes this one believes alive.
    pub(super) fn alive_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().filter(|(_, p)| p.alive).map(|(id, _)| *id)
    }
}

impl AgentState {
    pub fn peer_address(&self, node: &NodeId) -> Option<String> {
        self.peers.nodes.get(node).map(|p| p.address.clone())
    }

    /// The addresses of the other nodes this one believes alive.
    pub fn alive_peer_addresses(&self) -> Vec<String> {
        self.peers.alive_nodes().filter_map(|id| self.peer_address(&id)).collect()
    }

    pub fn describe_node(&self, node: &NodeId) -> String {
        match self.peers.nodes.get(node) {
            Some(p) => format!("node {} at {}", node.short(), p.address),
            None => format!("node {}", node.short()),
        }
    }

    /// This node belongs to a cluster that other nodes may join (`oxray start`).
    pub fn expect_joining_nodes(&mut self) {
        self.peers.may_grow = true;
    }

    pub(super) fn nodes_may_join(&self) -> bool {
        self.peers.may_grow
    }

    /// What every live node (this one included) offers in all.
    pub(super) fn cluster_total(&self) -> ResourceSet {
        let mut total = self.total.clone();
        for peer in self.peers.nodes.values().filter(|p| p.alive) {
            total.add(&peer.total);
        }
        total
    }

    /// Applies the head's node table; nodes that stopped beating are failed over.
    pub fn update_peers(&mut self, nodes: &[NodeInfo], now_ms: u64) {
        self.peers.updates += 1;
        let mut died = Vec::new();
        for n in nodes {
            let Ok(id) = NodeId::from_bytes(&n.node_id) else { continue };
            if id == self.node_id {
                continue;
            }
            self.peers.may_grow = true;
            let total = ResourceSet::from_map(&n.total).unwrap_or_default();
            let mut available = ResourceSet::from_map(&n.available).unwrap_or_default();
            let known = self.peers.nodes.get(&id);
            // Back from the dead: the head lists it alive again after listing it dead.
            let revived = n.alive && known.is_some_and(|p| p.failed && !p.head_alive);
            let failed = known.is_some_and(|p| p.failed) && !revived;
            if revived {
                let what = self.describe_node(&id);
                self.actions.push(Action::warn(format!("{what} is back: it takes work again")));
                self.actions.push(Action::ResetPeerLink { node: id });
            }
            let forwarded_at = known.and_then(|p| p.forwarded_at);
            // The head's figures may predate work forwarded there in the last two updates (its beat
            // came first): keep the lower of the two until the node's own report has caught up.
            if let (Some(at), Some(known)) = (forwarded_at, known)
                && self.peers.updates.saturating_sub(at) <= RECENT_FORWARD_UPDATES
            {
                available.lower_to(&known.available);
            }
            let view = PeerView {
                address: n.address.clone(),
                alive: n.alive && !failed,
                total,
                available,
                failed,
                head_alive: n.alive,
                labels: n.labels.clone(),
                forwarded_at,
            };
            if let Some(old) = self.peers.nodes.insert(id, view)
                && old.alive
                && !n.alive
                && !failed
            {
                died.push(id);
            }
        }
        for node in died {
            self.node_died(node, "it stopped sending heartbeats to the head", now_ms);
        }
        self.schedule(now_ms);
    }

    /// This node's view of `peer`'s available resources.
    #[cfg(test)]
    pub(super) fn peer_available(&self, peer: NodeId) -> Option<&ResourceSet> {
        self.peers.nodes.get(&peer).map(|p| &p.available)
    }

    /// Whether any live node (this one included) could ever hold `request`.
    pub fn feasible_anywhere(&self, request: &ResourceSet) -> bool {
        self.total.fits(request) || self.peers.nodes.values().any(|p| p.alive && p.total.fits(request))
    }

    /// Another node to run a task that cannot run here now: one with room now,
    /// else (when this node can never run it) one that can eventually.
    pub(super) fn pick_peer(&self, task_id: TaskId, placement: &ResourceSet) -> Option<NodeId> {
        let task = self.tasks.get(&task_id)?;
        if task.from_peer.is_some() {
            return None;
        }
        let selector = self.effective_selector(&task.spec, placement).unwrap_or_default();
        let alive = || self.peers.nodes.iter().filter(|(_, p)| p.alive && selector.matches(&p.labels));
        if let Some((id, _)) = alive().find(|(_, p)| p.available.fits(placement)) {
            return Some(*id);
        }
        if self.total.fits(placement) {
            return None;
        }
        alive()
            .filter(|(_, p)| p.total.fits(placement))
            .max_by_key(|(_, p)| (p.available.get("CPU") * 1e4) as i64)
            .map(|(id, _)| *id)
    }

    /// Where a ready task may run: Ray's node affinity strategy (a placement
    /// group's bundles are resources, placed like any other; `SPREAD` is `spread_to`).
    pub(super) fn placement_for(&mut self, task_id: TaskId, placement: &ResourceSet) -> Placement {
        let Some(task) = self.tasks.get(&task_id).filter(|t| t.from_peer.is_none()) else {
            return Placement::Anywhere; // its owner's node placed it here
        };
        if let Some(affinity) = &task.spec.node_affinity {
            let soft = affinity.soft;
            let Ok(node) = NodeId::from_bytes(&affinity.node_id) else {
                return Placement::Fail(format!(
                    "NodeAffinitySchedulingStrategy: {:?} is not a node id",
                    affinity.node_id
                ));
            };
            let known = node == self.node_id || self.peers.nodes.contains_key(&node);
            if !known && !soft {
                let now = self.peers.updates;
                if *self.peers.awaiting_node.entry(task_id).or_insert(now) == now {
                    return Placement::Wait;
                }
            }
            self.peers.awaiting_node.remove(&task_id);
            let (alive, fits) = if node == self.node_id {
                (true, self.total.fits(placement))
            } else {
                self.peers.nodes.get(&node).map_or((false, false), |p| (p.alive, p.total.fits(placement)))
            };
            return match (alive, fits) {
                (true, true) if node == self.node_id => Placement::Here,
                (true, true) => Placement::Node(node),
                _ if soft => Placement::Anywhere,
                (true, false) => Placement::Fail(format!(
                    "NodeAffinitySchedulingStrategy(soft=False): node {node} can never hold this task's {placement}; \
                     pass soft=True to run it elsewhere"
                )),
                (false, _) => Placement::Fail(format!(
                    "NodeAffinitySchedulingStrategy(soft=False): node {node} is not a live node of this cluster; \
                     pass soft=True to run it elsewhere"
                )),
            };
        }
        if task.spec.label_selector.is_empty() {
            return Placement::Anywhere;
        }
        let selector = match self.effective_selector(&task.spec, placement) {
            Ok(selector) => selector,
            Err(e) => return Placement::Fail(e.to_string()),
        };
        if selector.matches(&self.labels) && self.total.fits(placement) {
            return Placement::Anywhere; // here, or a matching peer (`pick_peer` asks only those)
        }
        let matching = || {
            self.peers.nodes.iter().filter(|(_, p)| p.alive && selector.matches(&p.labels) && p.total.fits(placement))
        };
        if let Some((node, _)) = matching().find(|(_, p)| p.available.fits(placement)).or_else(|| matching().next()) {
            return Placement::Node(*node);
        }
        if self.nodes_may_join() {
            return Placement::Wait; // a node with those labels may join (`warn_infeasible` says so)
        }
        Placement::Fail(format!(
            "no node of the cluster has labels matching label_selector {selector} and room for {placement}"
        ))
    }

    /// Labels no live node (this one included) matches, for a waiting task's warning.
    pub(super) fn unmatched_selector(&self, spec: &TaskSpec) -> Option<LabelSelector> {
        let selector = self.effective_selector(spec, &ResourceSet::new()).ok().filter(|s| !s.is_empty())?;
        let matched =
            selector.matches(&self.labels) || self.peers.nodes.values().any(|p| p.alive && selector.matches(&p.labels));
        (!matched).then_some(selector)
    }

    /// The selector a task is placed by: its `label_selector` when a live node (this one
    /// included) matches it and could hold `placement`, else the first of its
    /// `fallback_strategy` selectors that has such a node, else its own (which then
    /// names what is missing).
    pub(super) fn effective_selector(
        &self,
        spec: &TaskSpec,
        placement: &ResourceSet,
    ) -> Result<LabelSelector, crate::labels::LabelError> {
        let primary = LabelSelector::parse(&spec.label_selector)?;
        if spec.fallback_strategy.is_empty() {
            return Ok(primary);
        }
        let holds = |s: &LabelSelector| {
            (s.matches(&self.labels) && self.total.fits(placement))
                || self.peers.nodes.values().any(|p| p.alive && s.matches(&p.labels) && p.total.fits(placement))
        };
        if holds(&primary) {
            return Ok(primary);
        }
        for fallback in &spec.fallback_strategy {
            let selector = LabelSelector::parse(&fallback.label_selector)?;
            if holds(&selector) {
                return Ok(selector);
            }
        }
        Ok(primary)
    }

    /// Ray's `SPREAD`: the node a ready task goes to, taking turns over the live
    /// nodes with room now (this one included) or, when none has room, over every
    /// live node it fits on (it queues there), so a burst of tasks spreads evenly
    /// instead of piling up here; None keeps it here.
    pub(super) fn spread_to(&mut self, task_id: TaskId) -> Option<NodeId> {
        let task = self.tasks.get(&task_id).filter(|t| t.spec.spread && t.from_peer.is_none())?;
        let (placement, holds) = (&task.placement, &task.holds);
        let selector = self.effective_selector(&task.spec, placement).unwrap_or_default();
        // Room here is what is free once the tasks already queued here start.
        let mut free_here = self.available.clone();
        free_here.subtract(&self.tasks.queued_placement());
        let candidates = |with_room: bool| -> Vec<NodeId> {
            let mut nodes: Vec<NodeId> = self
                .peers
                .nodes
                .iter()
                .filter(|(_, p)| p.alive && !p.failed && selector.matches(&p.labels))
                .filter(|(_, p)| if with_room { p.available.fits(placement) } else { p.total.fits(placement) })
                .map(|(id, _)| *id)
                .collect();
            let here = if with_room {
                free_here.fits(placement) && self.available.fits(holds)
            } else {
                self.total.fits(placement) && self.total.fits(holds)
            };
            if here && selector.matches(&self.labels) {
                nodes.push(self.node_id);
            }
            nodes
        };
        let mut nodes = candidates(true);
        if nodes.is_empty() {
            nodes = candidates(false);
        }
        if nodes.is_empty() {
            return None; // it fits nowhere: placed as usual (which waits or fails it)
        }
        nodes.sort();
        let node = nodes[self.peers.spread_turn % nodes.len()];
        self.peers.spread_turn = self.peers.spread_turn.wrapping_add(1);
        (node != self.node_id).then_some(node)
    }

    /// Ray's locality-aware default placement: a plain task with no strategy of its own
    /// runs where the most bytes of its object arguments (and the references inside them)
    /// are, when that is another node
    /// with room for it now (the arguments then cross no link). None leaves it to the
    /// usual placement (here if it fits, else a node with room).
    pub(super) fn locality_node(&self, task_id: TaskId) -> Option<NodeId> {
        let task = self.tasks.get(&task_id)?;
        let spec = &task.spec;
        let own_strategy = spec.spread || spec.node_affinity.is_some() || !spec.label_selector.is_empty();
        if task.from_peer.is_some() || own_strategy || spec.kind != TaskKind::Normal as i32 {
            return None;
        }
        let mut bytes: HashMap<NodeId, u64> = HashMap::new();
        let args = spec.args.iter().filter_map(|a| match &a.kind {
            Some(Kind::ObjectId(raw)) => Some(raw),
            _ => None,
        });
        // References inside its arguments count too (a read of stored blocks carries them so).
        for raw in args.chain(&spec.nested_refs) {
            let Ok(id) = ObjectId::from_bytes(raw) else { continue };
            if let Some(size) = self.objects.store().sealed_size(&id) {
                *bytes.entry(self.node_id).or_default() += size as u64;
            } else if let Some(copy) = self.objects.get(&id).and_then(|m| m.remote.as_ref()) {
                *bytes.entry(copy.node).or_default() += copy.size;
            }
        }
        let here = bytes.get(&self.node_id).copied().unwrap_or(0);
        let (node, most) = bytes.into_iter().filter(|(n, _)| *n != self.node_id).max_by_key(|&(n, b)| (b, n))?;
        let peer = self.peers.nodes.get(&node)?;
        (most > here && peer.alive && !peer.failed && peer.available.fits(&task.placement)).then_some(node)
    }

    pub(super) fn source_of(&self, id: ObjectId) -> ArgSource {
        let remote = self
            .objects
            .get(&id)
            .and_then(|m| m.remote.as_ref())
            .filter(|_| !self.objects.store().contains_sealed(&id));
        match remote {
            Some(copy) => {
                ArgSource { object_id: id.to_vec(), address: copy.address.clone(), node_id: copy.node.to_vec() }
            }
            None => ArgSource { object_id: id.to_vec(), address: self.address.clone(), node_id: self.node_id.to_vec() },
        }
    }

    /// Sends a task to `node`; it stays here, marked forwarded, until that node reports back.
    pub(super) fn forward_task(&mut self, task_id: TaskId, node: NodeId) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        tracing::debug!(task = %task_id.hex(), node = %node.short(), "scheduling: task sent to another node");
        task.state = TaskState::Forwarded(node);
        let mut spec = task.spec.clone();
        // Placed: the node it goes to runs it (its strategy is not applied there again).
        spec.spread = false;
        spec.node_affinity = None;
        spec.label_selector.clear();
        spec.fallback_strategy.clear();
        let placement = task.placement.clone();
        if let Some(peer) = self.peers.nodes.get_mut(&node) {
            peer.available.subtract(&placement);
            peer.forwarded_at = Some(self.peers.updates);
        }
        let mut sources = Vec::new();
        let arg_ids = spec.args.iter().filter_map(|a| match &a.kind {
            Some(Kind::ObjectId(raw)) => Some(raw.clone()),
            _ => None,
        });
        for raw in arg_ids.chain(spec.nested_refs.iter().cloned()) {
            if let Ok(id) = ObjectId::from_bytes(&raw) {
                sources.push(self.source_of(id));
            }
        }
        if spec.kind == TaskKind::ActorCreation as i32
            && let Some(actor) = ActorId::from_bytes(&spec.actor_id).ok().and_then(|a| self.actors.get_mut(&a))
        {
            actor.remote = Some(node);
            if actor.max_restarts >= 0 {
                spec.max_restarts = (actor.max_restarts - actor.num_restarts).max(0);
            }
        }
        // An ended job's work (its detached actors') always carries the function:
        // the other node may have dropped the job's functions since it was sent.
        let job_ended = JobId::from_bytes(&spec.job_id).is_ok_and(|j| self.functions.has_ended(&j));
        let sent = |peers: &mut PeerTable| {
            !job_ended && !peers.sent_functions.insert((node, spec.function_id.clone(), spec.job_id.clone()))
        };
        let function = if spec.function_id.is_empty() || sent(&mut self.peers) {
            Vec::new()
        } else {
            self.functions.get(&spec.function_id).cloned().unwrap_or_default()
        };
        self.actions
            .push(Action::Forward { node, task: Box::new(ForwardTask { spec: Some(spec), sources, function }) });
    }

    /// Reference arguments whose bytes are not on this node yet.
    pub(super) fn nonlocal_args(&self, task_id: TaskId) -> Vec<ObjectId> {
        let Some(task) = self.tasks.get(&task_id) else { return Vec::new() };
        task.spec
            .args
            .iter()
            .filter_map(|a| match &a.kind {
                Some(Kind::ObjectId(raw)) => ObjectId::from_bytes(raw).ok(),
                _ => None,
            })
            .filter(|id| !self.is_local(id))
            .collect()
    }

    /// Parks a task until `ids` are copied here, starting the copies.
    pub(super) fn wait_for_copies(&mut self, task_id: TaskId, ids: Vec<ObjectId>) {
        for id in &ids {
            self.request_pull(*id);
            self.tasks.add_waiter(*id, task_id);
        }
        if let Some(task) = self.tasks.get_mut(&task_id) {
            task.missing_args.extend(ids);
            task.state = TaskState::WaitingArgs;
        }
    }

    /// Starts copying `id` here from the node that has it (once).
    pub fn request_pull(&mut self, id: ObjectId) {
        if self.objects.store().contains_sealed(&id) || self.objects.is_pulling(&id) {
            return;
        }
        let Some(copy) = self.objects.get(&id).and_then(|m| m.remote.clone()) else { return };
        self.objects.start_pull(id);
        self.actions.push(Action::Pull { id, address: copy.address });
    }

    /// Whether none of `ids` is ready elsewhere but missing here.
    pub fn all_local_or_settled(&self, ids: &[ObjectId]) -> bool {
        ids.iter().all(|id| !self.is_ready(id) || self.is_local(id))
    }

    /// Objects among `ids` that are ready elsewhere but not here; starts their copies.
    pub fn fetch_remote(&mut self, ids: &[ObjectId]) -> usize {
        let missing: Vec<ObjectId> = ids.iter().copied().filter(|id| self.is_ready(id) && !self.is_local(id)).collect();
        for id in &missing {
            self.request_pull(*id);
        }
        missing.len()
    }

    /// A copy finished arriving: `Some(bytes)` for a small object, `None` when it
    /// was written into a reservation, or the reason it could not be copied.
    pub fn pull_finished(&mut self, id: ObjectId, outcome: Result<Option<Vec<u8>>, CopyError>, now_ms: u64) {
        self.objects.end_pull(&id);
        if !self.objects.contains_key(&id) {
            // Freed while it was being copied.
            self.objects.store_mut().discard_unsealed(&id);
            self.objects.store_mut().free(&id);
            return;
        }
        match outcome {
            Ok(Some(data)) => self.objects.store_mut().insert_inline(id, data),
            Ok(None) => {
                if !self.objects.store_mut().seal(&id) {
                    return;
                }
            }
            // Made here meanwhile (its task ran on this node): the copy is not needed.
            Err(_) if self.objects.store().contains_sealed(&id) => return,
            Err(error) => {
                let message = error.to_string();
                self.objects.store_mut().discard_unsealed(&id);
                if let Some(meta) = self.objects.get_mut(&id) {
                    meta.remote = None;
                }
                self.store_error(id, SystemErrorKind::ObjectLost, &message, now_ms);
                self.schedule(now_ms);
                return;
            }
        }
        if let Some(meta) = self.objects.get_mut(&id) {
            meta.ready = true;
        }
        self.on_object_ready(id, now_ms);
        self.schedule(now_ms);
    }

    /// Whether `id` is not here yet but a task this node owns or runs will make it.
    pub fn awaits_its_task(&self, id: &ObjectId) -> bool {
        !self.is_local(id) && self.tasks.produces_pending(id)
    }

    /// Records that `node` holds a copy of `id` for this node (or gives it back
    /// when this node already has one).
    pub(super) fn note_remote_copy(&mut self, id: ObjectId, node: NodeId, address: &str, size: u64) {
        let have_local = self.objects.store().contains_sealed(&id);
        let meta = self.objects.entry(id);
        if (meta.ready && have_local) || meta.remote.as_ref().is_some_and(|c| c.held && c.node != node) {
            self.actions.push(Action::ReleaseRemote { node, id });
            return;
        }
        meta.remote = Some(RemoteCopy { node, address: address.to_string(), size, held: true });
        meta.ready = true;
    }

    /// A forwarded task finished on `node`.
    pub fn remote_task_done(&mut self, node: NodeId, done: RemoteTaskDone, now_ms: u64) -> Result<(), AgentError> {
        let task_id = TaskId::from_bytes(&done.task_id)?;
        let nested = done.nested.iter().map(|n| ObjectId::from_bytes(n)).collect::<Result<Vec<_>, _>>()?;
        let current = self.tasks.get(&task_id).is_some_and(|t| t.state == TaskState::Forwarded(node));
        if !current {
            // Cancelled or failed over meanwhile: give back what the node kept for us.
            for r in done.returns.iter().filter(|r| !r.inline) {
                self.actions.push(Action::ReleaseRemote { node, id: ObjectId::from_bytes(&r.object_id)? });
            }
            for id in nested {
                self.actions.push(Action::ReleaseRemote { node, id });
            }
            return Ok(());
        }
        let address = self.peer_address(&node).unwrap_or_default();
        for n in &nested {
            self.note_remote_copy(*n, node, &address, 0);
        }
        for r in done.returns {
            let id = ObjectId::from_bytes(&r.object_id)?;
            if r.inline {
                let size = r.inline_data.len() as u64;
                let loc =
                    ObjectLocation { object_id: r.object_id, place: Some(Place::InlineData(r.inline_data)), size };
                self.seal_object(&loc, &nested, now_ms)?;
            } else {
                self.note_remote_copy(id, node, &address, r.size);
                for n in &nested {
                    self.pin(*n);
                }
                self.objects.entry(id).nested.extend_from_slice(&nested);
                self.on_object_ready(id, now_ms);
            }
        }
        if let Some(actor) = self.actor_of_task(task_id) {
            actor.inflight.retain(|t| *t != task_id);
        }
        // A plain task's resources are free there again (an actor's creation keeps them):
        // the next task placed by locality need not wait for the head's figures.
        if let Some(task) = self.tasks.get(&task_id).filter(|t| t.spec.kind == TaskKind::Normal as i32)
            && let Some(peer) = self.peers.nodes.get_mut(&node)
        {
            peer.available.add(&task.placement);
            peer.available.lower_to(&peer.total);
        }
        self.finish_task(task_id, None, now_ms);
        self.schedule(now_ms);
        Ok(())
    }

    /// The node hosting an actor this node created (or routes to) reports its state.
    pub fn remote_actor_state(&mut self, node: NodeId, info: ActorInfo, now_ms: u64) -> Result<(), AgentError> {
        let actor_id = ActorId::from_bytes(&info.actor_id)?;
        let Some(actor) = self.actors.get_mut(&actor_id).filter(|a| a.remote == Some(node)) else { return Ok(()) };
        let reported = ActorState::from_proto(info.state());
        actor.pid = info.pid;
        actor.num_restarts = actor.num_restarts.max(info.num_restarts);
        if !info.method_names.is_empty() {
            actor.method_names = info.method_names;
        }
        match reported {
            ActorState::Alive => {
                actor.state = ActorState::Alive;
                self.settle_creation(actor_id, now_ms);
                self.dispatch_actor(actor_id, now_ms);
            }
            ActorState::Restarting => actor.state = ActorState::Restarting,
            ActorState::Dead => {
                actor.state = ActorState::Dead;
                actor.death_cause = info.death_cause;
                actor.death_kind = SystemErrorKind::ActorDied;
                self.settle_creation(actor_id, now_ms);
                self.fail_actor_queue(actor_id, now_ms);
                self.release_actor(actor_id, now_ms);
            }
            ActorState::PendingCreation => {}
        }
        Ok(())
    }

    /// Ends an actor's creation task (if still there), keeping its arguments pinned by the actor.
    pub(super) fn settle_creation(&mut self, actor_id: ActorId, now_ms: u64) {
        let Some(creation) = self.actors.get(&actor_id).and_then(|a| TaskId::from_bytes(&a.creation.task_id).ok())
        else {
            return;
        };
        if !self.tasks.contains_key(&creation) {
            return;
        }
        let pinned = self.tasks.get_mut(&creation).map(|t| std::mem::take(&mut t.pinned)).unwrap_or_default();
        self.finish_task(creation, None, now_ms);
        let actor = self.actors.get_mut(&actor_id).expect("checked");
        if actor.arg_pins.is_empty() {
            actor.arg_pins = pinned;
        } else {
            for id in pinned {
                self.unpin(id, now_ms);
            }
        }
    }

    /// `node` is gone: retry or fail what was forwarded there, restart its actors
    /// (or fail them), and mark objects whose only copy was there as lost.
    pub fn node_died(&mut self, node: NodeId, reason: &str, now_ms: u64) {
        let what = self.describe_node(&node);
        if let Some(peer) = self.peers.nodes.get_mut(&node) {
            peer.alive = false;
            peer.failed = true;
        }
        self.peers.sent_functions.retain(|(n, _, _)| *n != node);
        let forwarded: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.state == TaskState::Forwarded(node) && t.spec.kind == TaskKind::Normal as i32)
            .map(|(id, _)| *id)
            .collect();
        for task_id in forwarded {
            let task = self.tasks.get(&task_id).expect("listed above");
            if task.retries_left != 0 && !task.cancelled && !self.shutting_down {
                let name = task.spec.name.clone();
                self.actions.push(Action::warn(format!("task {name} was running on {what}, which died; retrying")));
                self.retry(task_id, now_ms);
            } else {
                let message = format!(
                    "The task {} was running on {what}, which died ({reason}), and the task has no retries left",
                    task.spec.name
                );
                self.finish_task(task_id, Some((SystemErrorKind::WorkerCrashed, message)), now_ms);
            }
        }
        let hosted: Vec<ActorId> = self.actors.values().filter(|a| a.remote == Some(node)).map(|a| a.id).collect();
        for actor_id in hosted {
            self.remote_actor_lost(actor_id, &format!("{what} died ({reason})"), now_ms);
        }
        let lost: Vec<ObjectId> = self
            .objects
            .iter()
            .filter(|(id, m)| m.remote.as_ref().is_some_and(|c| c.node == node) && !self.objects.is_pulling(id))
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            let meta = self.objects.get_mut(&id).expect("listed");
            meta.remote = None;
            if !self.objects.store().contains_sealed(&id) {
                let message = format!("Object {} is lost: its only copy was on {what}, which died", id.hex());
                self.store_error(id, SystemErrorKind::ObjectLost, &message, now_ms);
            }
        }
        self.schedule(now_ms);
    }

    pub(super) fn remote_actor_lost(&mut self, actor_id: ActorId, cause: &str, now_ms: u64) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        actor.remote = None;
        if actor.state == ActorState::Dead {
            return;
        }
        let can_restart = !actor.proxy
            && !actor.no_restart
            && !self.shutting_down
            && (actor.max_restarts < 0 || actor.num_restarts < actor.max_restarts);
        actor.death_cause = format!("The actor {} died because {cause}", actor.class_name);
        actor.death_kind = SystemErrorKind::ActorDied;
        let inflight: Vec<TaskId> = actor.inflight.drain(..).collect();
        let death = actor.death_cause.clone();
        let proxy = actor.proxy;
        let mut retry_ids = Vec::new();
        for task_id in inflight {
            if can_restart && self.tasks.get(&task_id).is_some_and(|t| t.retries_left != 0) {
                retry_ids.push(task_id);
            } else {
                self.finish_task(task_id, Some((SystemErrorKind::ActorDied, death.clone())), now_ms);
            }
        }
        for task_id in retry_ids.into_iter().rev() {
            self.retry(task_id, now_ms);
        }
        if can_restart {
            self.settle_creation(actor_id, now_ms);
            let actor = self.actors.get_mut(&actor_id).expect("exists");
            actor.num_restarts += 1;
            actor.state = ActorState::Restarting;
            self.actions.push(Action::warn(format!("restarting actor {} because {cause}", actor.class_name)));
            self.actions.push(Action::ActorChanged(actor_id));
            self.restart_creation(actor_id, now_ms);
        } else {
            self.settle_creation(actor_id, now_ms);
            let actor = self.actors.get_mut(&actor_id).expect("exists");
            actor.state = ActorState::Dead;
            self.fail_actor_queue(actor_id, now_ms);
            self.release_actor(actor_id, now_ms);
            if proxy {
                // Only routed from here: the next call asks the head where it lives now.
                self.actors.remove(&actor_id);
            } else {
                self.actions.push(Action::ActorChanged(actor_id));
            }
        }
    }

    /// Routes calls to an actor that another node created, wherever the head says it lives.
    pub fn add_actor_proxy(&mut self, info: &ActorInfo) -> Result<(), AgentError> {
        let actor_id = ActorId::from_bytes(&info.actor_id)?;
        let node = NodeId::from_bytes(&info.node_id)?;
        let dead = ActorState::from_proto(info.state()) == ActorState::Dead;
        if self.actors.contains_key(&actor_id) || (node == self.node_id && !dead) {
            return Ok(());
        }
        let spec = TaskSpec { actor_id: info.actor_id.clone(), name: info.class_name.clone(), ..Default::default() };
        let mut entry = ActorEntry::new(actor_id, &spec);
        entry.proxy = true;
        // A dead actor once hosted here (and since forgotten) is only a record of its death.
        entry.remote = Some(node).filter(|n| *n != self.node_id);
        entry.max_task_retries = info.max_task_retries;
        entry.method_names = info.method_names.clone();
        entry.state = match ActorState::from_proto(info.state()) {
            ActorState::Restarting => ActorState::PendingCreation,
            state => state,
        };
        entry.death_cause = info.death_cause.clone();
        self.actors.insert(actor_id, entry);
        if dead {
            self.retire_actor(actor_id);
        }
        Ok(())
    }

    // ------------------------------------------------- tasks from other nodes

    pub fn peer_connected(&mut self, owner: NodeId) {
        self.peers.owners.insert(owner);
    }

    /// Accepts a task an owner node forwarded; returns the ids to report back when ready.
    pub fn accept_forward(
        &mut self,
        owner: NodeId,
        forward: ForwardTask,
        now_ms: u64,
    ) -> Result<Vec<ObjectId>, AgentError> {
        let spec = forward.spec.ok_or(AgentError::Malformed("a forwarded task needs a spec"))?;
        if !forward.function.is_empty() {
            self.register_function(spec.function_id.clone(), forward.function, JobId::from_bytes(&spec.job_id).ok());
        }
        for source in forward.sources {
            let id = ObjectId::from_bytes(&source.object_id)?;
            let node = NodeId::from_bytes(&source.node_id).unwrap_or_default();
            if self.objects.store().contains_sealed(&id) || self.objects.is_pulling(&id) {
                continue;
            }
            let meta = self.objects.entry(id);
            if !meta.ready {
                meta.ready = true;
                meta.remote = Some(RemoteCopy { node, address: source.address, size: 0, held: false });
            }
        }
        let task_id = TaskId::from_bytes(&spec.task_id)?;
        let return_ids = spec.return_ids.iter().map(|r| ObjectId::from_bytes(r)).collect::<Result<Vec<_>, _>>()?;
        match spec.kind {
            k if k == TaskKind::ActorCreation as i32 => {
                let actor_id = ActorId::from_bytes(&spec.actor_id)?;
                if !self.actors.contains_key(&actor_id) {
                    self.register_actor(&spec, false)?;
                }
                if let Some(actor) = self.actors.get_mut(&actor_id) {
                    actor.hosted_for = Some(owner);
                    actor.max_restarts = spec.max_restarts;
                }
                self.submit(owner.into(), spec, now_ms)?;
            }
            k if k == TaskKind::ActorTask as i32 => self.submit_actor_task(owner.into(), spec, now_ms)?,
            _ => {
                self.submit(owner.into(), spec, now_ms)?;
            }
        }
        if let Some(task) = self.tasks.get_mut(&task_id) {
            task.from_peer = Some(owner);
        }
        self.schedule(now_ms);
        Ok(return_ids)
    }

    /// What to tell the owner once a forwarded task's returns are ready: small
    /// values travel now, larger ones (and refs nested in them) stay held here for it.
    pub fn remote_done_for(
        &mut self,
        owner: NodeId,
        task_id: TaskId,
        return_ids: &[ObjectId],
        now_ms: u64,
    ) -> Option<RemoteTaskDone> {
        if !self.peers.owners.contains(&owner) {
            return None;
        }
        let mut nested = Vec::new();
        for id in return_ids {
            if let Some(meta) = self.objects.get(id) {
                nested.extend(meta.nested.iter().copied());
            }
        }
        self.add_holders(owner.into(), &nested);
        let mut returns = Vec::new();
        let mut sent_inline = Vec::new();
        for id in return_ids {
            let object = match self.objects.store_mut().lookup(id) {
                Some((ObjectPlace::Inline(data), size)) => {
                    sent_inline.push(*id);
                    RemoteObject {
                        object_id: id.to_vec(),
                        inline: true,
                        inline_data: (*data).clone(),
                        size: size as u64,
                    }
                }
                Some((_, size)) => {
                    RemoteObject { object_id: id.to_vec(), inline: false, inline_data: Vec::new(), size: size as u64 }
                }
                None => {
                    let message = format!("Object {} is lost on {}", id.hex(), self.node_id.short());
                    let blob = system_error_object(SystemErrorKind::ObjectLost, &message);
                    RemoteObject { object_id: id.to_vec(), inline: true, size: blob.len() as u64, inline_data: blob }
                }
            };
            returns.push(object);
        }
        self.remove_holders(owner.into(), &sent_inline, now_ms);
        Some(RemoteTaskDone { task_id: task_id.to_vec(), returns, nested: nested.iter().map(|n| n.to_vec()).collect() })
    }

    /// An owner node's link closed: drop what was held for it, stop its tasks
    /// and kill the actors it created (unless detached).
    pub fn peer_gone(&mut self, owner: NodeId, now_ms: u64) {
        self.peers.owners.remove(&owner);
        let held: Vec<ObjectId> =
            self.objects.iter().filter(|(_, m)| m.holders.contains(&owner.into())).map(|(id, _)| *id).collect();
        self.remove_holders(owner.into(), &held, now_ms);
        let tasks: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.from_peer == Some(owner) && t.spec.kind != TaskKind::ActorCreation as i32)
            .map(|(id, _)| *id)
            .collect();
        for task_id in tasks {
            let Some(task) = self.tasks.get_mut(&task_id) else { continue };
            task.cancelled = true;
            match task.state {
                TaskState::Running(worker) if task.spec.kind == TaskKind::Normal as i32 => {
                    self.signal_worker(worker, libc::SIGKILL);
                }
                TaskState::Running(_) => {}
                _ => {
                    self.unqueue(task_id);
                    self.finish_task(
                        task_id,
                        Some((SystemErrorKind::TaskCancelled, "Its owner node went away".into())),
                        now_ms,
                    );
                }
            }
        }
        let actors: Vec<ActorId> = self
            .actors
            .values()
            .filter(|a| a.hosted_for == Some(owner) && !a.creation.detached && a.state != ActorState::Dead)
            .map(|a| a.id)
            .collect();
        for actor_id in actors {
            let _ = self.kill_actor(actor_id, true, now_ms);
        }
        self.schedule(now_ms);
    }

    /// The node an actor this node routes to lives on, and who to tell about its changes.
    pub fn actor_host(&self, actor_id: &ActorId) -> (Option<NodeId>, Option<NodeId>) {
        self.actors.get(actor_id).map(|a| (a.remote, a.hosted_for)).unwrap_or((None, None))
    }
}
