//! The head's node table: registrations and heartbeats, each node's samples
//! within the metrics window, its queued demand and idle time, and which nodes
//! count as alive (heard from within `NODE_TIMEOUT`) or placeable.

use super::{Head, HeadError, History};
use crate::ids::{NodeId, PlacementGroupId};
use crate::resources::ResourceSet;
use crate::resources::group_names::{drop_group, hold_bundle, is_name_of};
use oxray_proto::{BundleSlot, HeartbeatRequest, NodeInfo, NodeStats, ResourceDemand};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// A node that has not sent a heartbeat for this long is reported dead
/// (agents beat every second).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(5);

const DEFAULT_METRICS_WINDOW_S: u64 = 3600;

/// `OXRAY_METRICS_WINDOW_S`, else an hour: how far back the head keeps each node's samples.
pub fn metrics_window_ms() -> u64 {
    std::env::var("OXRAY_METRICS_WINDOW_S")
        .ok()
        .and_then(|raw| raw.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_METRICS_WINDOW_S)
        .saturating_mul(1000)
}

/// Milliseconds of samples kept per node.
#[derive(Clone, Copy)]
pub(super) struct MetricsWindow(u64);

impl Default for MetricsWindow {
    fn default() -> Self {
        MetricsWindow(metrics_window_ms())
    }
}

struct NodeRecord {
    info: NodeInfo,
    last_seen: Instant,
    /// The node's samples within the metrics window, oldest first.
    samples: VecDeque<NodeStats>,
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
            samples: VecDeque::new(),
            demand: Vec::new(),
            idle_since: Some(last_seen),
            unreachable: false,
        }
    }

    fn alive(&self) -> bool {
        self.last_seen.elapsed() < NODE_TIMEOUT
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

/// What the load report reads of a live node.
pub(super) struct NodeLoad<'a> {
    pub(super) info: &'a NodeInfo,
    /// Work queued on it that waits for resources.
    pub(super) demand: &'a [ResourceDemand],
    /// Since when none of its resources has been in use (`None`: in use now).
    pub(super) idle_since: Option<Instant>,
}

/// Every node the head knows, the last `History` dead ones included.
#[derive(Default)]
pub(super) struct NodeTable {
    records: HashMap<NodeId, NodeRecord>,
}

impl NodeTable {
    /// Records a node (registered now, or loaded from redb with `last_seen` in the past).
    pub(super) fn insert(&mut self, id: NodeId, info: NodeInfo, last_seen: Instant) {
        self.records.insert(id, NodeRecord::new(info, last_seen));
    }

    /// A node's heartbeat: its resources, demand and sample. Returns whether it was
    /// silent for `NODE_TIMEOUT` before this beat (back from silence, or known from
    /// before a restart).
    pub(super) fn beat(
        &mut self,
        id: NodeId,
        beat: HeartbeatRequest,
        window: MetricsWindow,
    ) -> Result<bool, HeadError> {
        let record = self.records.get_mut(&id).ok_or(HeadError::UnknownNode(id))?;
        record.info.available = beat.available;
        record.demand = beat.demand;
        if let Some(stats) = beat.stats {
            let oldest = stats.time_ms.saturating_sub(window.0);
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
        let revived = !record.alive();
        record.last_seen = Instant::now();
        record.unreachable = false;
        Ok(revived)
    }

    /// Every node, the live head first.
    pub(super) fn all(&self) -> Vec<NodeInfo> {
        self.listed(|_| true)
    }

    /// Live nodes whose agent the head could reach since their last beat: where groups may go.
    pub(super) fn placeable(&self) -> Vec<NodeInfo> {
        self.listed(|r| !r.unreachable).into_iter().filter(|n| n.alive).collect()
    }

    /// The nodes whose record passes `keep`, with `alive` set: the live head first.
    fn listed(&self, keep: impl Fn(&NodeRecord) -> bool) -> Vec<NodeInfo> {
        let mut out: Vec<NodeInfo> = self
            .records
            .values()
            .filter(|r| keep(r))
            .map(|r| {
                let mut info = r.info.clone();
                info.alive = r.alive();
                info
            })
            .collect();
        // The live head first: after a restart the dead nodes of an earlier run are still listed,
        // and `nodes()[0]` (a joining driver's node, Ray users' habit) must be the head that runs.
        out.sort_by_key(|n| (!n.alive, !n.is_head, n.start_time_ms));
        out
    }

    /// The nodes not heard from for `NODE_TIMEOUT`.
    pub(super) fn silent(&self) -> Vec<NodeId> {
        self.records.iter().filter(|(_, r)| !r.alive()).map(|(id, _)| *id).collect()
    }

    /// Forgets the dead nodes beyond the last `keep` (longest silent first); returns them.
    pub(super) fn prune_dead(&mut self, keep: History) -> Vec<NodeId> {
        let mut dead: Vec<(Instant, NodeId)> =
            self.records.iter().filter(|(_, r)| !r.alive()).map(|(id, r)| (r.last_seen, *id)).collect();
        if dead.len() <= keep.0 {
            return Vec::new();
        }
        dead.sort();
        let forgotten: Vec<NodeId> = dead[..dead.len() - keep.0].iter().map(|(_, id)| *id).collect();
        for id in &forgotten {
            self.records.remove(id);
        }
        forgotten
    }

    /// Placement groups skip the node until its next beat.
    pub(super) fn mark_unreachable(&mut self, id: &NodeId) {
        if let Some(record) = self.records.get_mut(id) {
            record.unreachable = true;
        }
    }

    /// A node's agent address.
    pub(super) fn address(&self, id: &NodeId) -> Option<String> {
        self.records.get(id).map(|r| r.info.address.clone())
    }

    /// Group `group`'s committed bundles now held on `id`: its resources under Ray's
    /// bundle names, as the agent's next beat will report them.
    pub(super) fn hold_bundles(&mut self, id: &NodeId, group: &PlacementGroupId, slots: &[BundleSlot]) {
        let Some(record) = self.records.get_mut(id) else { return };
        let mut total = ResourceSet::from_map(&record.info.total).unwrap_or_default();
        let mut available = ResourceSet::from_map(&record.info.available).unwrap_or_default();
        for slot in slots {
            let bundle = ResourceSet::from_map(&slot.resources).unwrap_or_default();
            hold_bundle(&mut total, &mut available, group, slot.index, &bundle);
        }
        record.info.total = total.to_map();
        record.info.available = available.to_map();
    }

    /// Group `group`'s bundles on `id` given back (`freed`: their resources): its names
    /// gone and the resources free, as the agent's next beat will report them. Never above
    /// the node's total (a beat since the agent freed them may have counted them already).
    pub(super) fn release_bundles(&mut self, id: &NodeId, group: &PlacementGroupId, freed: &[ResourceSet]) {
        let Some(record) = self.records.get_mut(id) else { return };
        record.info.total.retain(|k, _| !is_name_of(k, group));
        let mut available = ResourceSet::from_map(&record.info.available).unwrap_or_default();
        drop_group(&mut available, group);
        for bundle in freed {
            available.add(bundle);
        }
        available.lower_to(&ResourceSet::from_map(&record.info.total).unwrap_or_default());
        record.info.available = available.to_map();
    }

    /// Drops group `group`'s bundle names from the node's total.
    pub(super) fn drop_bundles(&mut self, id: &NodeId, group: &PlacementGroupId) {
        if let Some(record) = self.records.get_mut(id) {
            record.info.total.retain(|k, _| !is_name_of(k, group));
        }
    }

    /// Each node's latest sample, by node id.
    pub(super) fn latest_samples(&self) -> HashMap<Vec<u8>, NodeStats> {
        self.records.values().filter_map(|r| r.samples.back().map(|s| (r.info.node_id.clone(), s.clone()))).collect()
    }

    /// Each node (in `all`'s order) with its samples taken after `since_ms`.
    pub(super) fn samples_since(&self, since_ms: u64) -> Vec<(NodeInfo, Vec<NodeStats>)> {
        self.all()
            .into_iter()
            .map(|info| {
                let samples = NodeId::from_bytes(&info.node_id)
                    .ok()
                    .and_then(|id| self.records.get(&id))
                    .map(|r| r.samples.iter().filter(|s| s.time_ms > since_ms).cloned().collect())
                    .unwrap_or_default();
                (info, samples)
            })
            .collect()
    }

    /// What the load report reads of each live node.
    pub(super) fn live_loads(&self) -> Vec<NodeLoad<'_>> {
        self.records
            .values()
            .filter(|r| r.alive())
            .map(|r| NodeLoad { info: &r.info, demand: &r.demand, idle_since: r.idle_since })
            .collect()
    }

    /// The ids of the live nodes.
    pub(super) fn alive_ids(&self) -> HashSet<Vec<u8>> {
        self.records.values().filter(|r| r.alive()).map(|r| r.info.node_id.clone()).collect()
    }

    #[cfg(test)]
    pub(super) fn idle_since(&self, id: &NodeId) -> Option<Instant> {
        self.records[id].idle_since
    }

    #[cfg(test)]
    pub(super) fn set_last_seen(&mut self, id: &NodeId, last_seen: Instant) {
        if let Some(record) = self.records.get_mut(id) {
            record.last_seen = last_seen;
        }
    }
}

impl Head {
    /// Every node the head knows, the last `history` dead ones included: the live head first.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.nodes.lock().all()
    }

    /// Live nodes whose agent the head could reach since their last beat: where groups may go.
    pub(super) fn placeable_nodes(&self) -> Vec<NodeInfo> {
        self.nodes.lock().placeable()
    }

    pub(super) fn mark_unreachable(&self, node_id: &[u8]) {
        let Ok(node_id) = NodeId::from_bytes(node_id) else { return };
        self.nodes.lock().mark_unreachable(&node_id);
    }

    /// Records a node that registered (again): written through first, then in the table.
    pub(super) fn add_node(&self, info: NodeInfo) -> Result<(), HeadError> {
        let node_id = NodeId::from_bytes(&info.node_id)?;
        self.persist_node(&info)?;
        self.nodes.lock().insert(node_id, info, Instant::now());
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// A node's heartbeat; the reply is the node table.
    pub(super) fn record_beat(&self, beat: HeartbeatRequest) -> Result<Vec<NodeInfo>, HeadError> {
        let node_id = NodeId::from_bytes(&beat.node_id)?;
        let revived = self.nodes.lock().beat(node_id, beat, self.metrics_window)?;
        if revived {
            // A node back from silence (or known from before a restart): waiters may now fit.
            self.changes.send_modify(|n| *n += 1);
        }
        if self.groups.lock().has_pending() {
            // Its resources as of now: a waiting group may fit.
            self.retry_placement.notify_one();
        }
        Ok(self.nodes())
    }

    fn persist_node(&self, info: &NodeInfo) -> Result<(), HeadError> {
        match &self.store {
            Some(store) => Ok(store.put_node(info)?),
            None => Ok(()),
        }
    }

    /// Forgets the dead nodes beyond the last `history`, in memory and in redb.
    pub(super) fn forget_old_dead_nodes(&self) {
        let forgotten = self.nodes.lock().prune_dead(self.history);
        self.forget(forgotten, Vec::new());
    }

    /// Each node's latest sample.
    pub fn latest_samples(&self) -> HashMap<Vec<u8>, NodeStats> {
        self.nodes.lock().latest_samples()
    }

    /// Each node with its samples taken after `since_ms` (within the window).
    pub fn node_samples(&self, since_ms: u64) -> Vec<(NodeInfo, Vec<NodeStats>)> {
        self.nodes.lock().samples_since(since_ms)
    }
}
