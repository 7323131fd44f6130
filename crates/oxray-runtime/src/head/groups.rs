//! The head's placement groups: the group table (the last removed ones kept),
//! checking a new group's spec, and the placement loop, which plans a pending
//! group's bundles over the nodes (`placement.rs`) and places them in two phases
//! (reserve on every chosen agent, then commit), giving them back if any fails.

use super::placement::{Strategy, plan, plan_in_domains};
use super::{Head, HeadError, History, NODE_TIMEOUT};
use crate::client::{BundleClient, ClientError};
use crate::ids::{NodeId, PlacementGroupId};
use crate::labels::LabelSelector;
use crate::resources::ResourceSet;
use oxray_proto::{
    BundleSlot, NodeInfo, PlacementGroupInfo, PlacementGroupRequest, PlacementGroupSpec, PlacementGroupState,
    ReserveBundlesRequest,
};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tonic::{Code, Request, Status};

/// How long the head waits on an agent's bundle call: a healthy agent answers at once, one
/// silent this long counts as dead anyway, and a frozen node must not hold up every group.
const BUNDLE_CALL_DEADLINE: Duration = NODE_TIMEOUT;

fn bundle_call<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(BUNDLE_CALL_DEADLINE);
    request
}

/// Every placement group the head knows, the last `History` removed ones included.
#[derive(Default)]
pub(super) struct GroupTable {
    groups: HashMap<PlacementGroupId, PlacementGroupInfo>,
    /// Removed placement groups, oldest first (the last `History` are kept).
    removed: VecDeque<PlacementGroupId>,
}

impl GroupTable {
    /// Whether any group waits to be placed.
    pub(super) fn has_pending(&self) -> bool {
        self.groups.values().any(|g| g.state() == PlacementGroupState::Pending)
    }

    /// The groups waiting to be placed.
    pub(super) fn pending(&self) -> Vec<PlacementGroupId> {
        self.groups.iter().filter(|(_, g)| g.state() == PlacementGroupState::Pending).map(|(id, _)| *id).collect()
    }

    /// The specs of the groups waiting to be placed.
    pub(super) fn pending_specs(&self) -> Vec<PlacementGroupSpec> {
        self.groups
            .values()
            .filter(|g| g.state() == PlacementGroupState::Pending)
            .filter_map(|g| g.spec.clone())
            .collect()
    }

    /// Group `pg_id`'s spec, if it is still waiting to be placed.
    fn pending_spec(&self, pg_id: &PlacementGroupId) -> Option<PlacementGroupSpec> {
        self.groups.get(pg_id).filter(|g| g.state() == PlacementGroupState::Pending).and_then(|g| g.spec.clone())
    }

    /// Records a new group, pending.
    fn add_pending(&mut self, pg_id: PlacementGroupId, spec: PlacementGroupSpec) {
        let info = PlacementGroupInfo {
            spec: Some(spec),
            state: PlacementGroupState::Pending as i32,
            bundle_nodes: Vec::new(),
        };
        self.groups.insert(pg_id, info);
    }

    /// Records a group as placed, all of its bundles on `node`.
    fn adopt(&mut self, pg_id: PlacementGroupId, spec: PlacementGroupSpec, node: Vec<u8>) {
        let bundle_nodes = vec![node; spec.bundles.len()];
        let info = PlacementGroupInfo { spec: Some(spec), state: PlacementGroupState::Created as i32, bundle_nodes };
        self.groups.insert(pg_id, info);
    }

    /// A group's bundles are committed on `bundle_nodes` (by bundle).
    fn mark_created(&mut self, pg_id: &PlacementGroupId, bundle_nodes: Vec<Vec<u8>>) {
        if let Some(group) = self.groups.get_mut(pg_id) {
            group.set_state(PlacementGroupState::Created);
            group.bundle_nodes = bundle_nodes;
        }
    }

    /// Marks a group removed (the last `keep` removed ones are kept); returns the
    /// node of each of its bundles (none if it was not placed) and its spec.
    fn remove(
        &mut self,
        pg_id: PlacementGroupId,
        keep: History,
    ) -> Result<(Vec<Vec<u8>>, Option<PlacementGroupSpec>), HeadError> {
        let Some(group) = self.groups.get_mut(&pg_id) else {
            return Err(HeadError::UnknownPlacementGroup(pg_id));
        };
        group.set_state(PlacementGroupState::Removed);
        let nodes = (std::mem::take(&mut group.bundle_nodes), group.spec.clone());
        if !self.removed.contains(&pg_id) {
            self.removed.push_back(pg_id);
        }
        while self.removed.len() > keep.0 {
            if let Some(old) = self.removed.pop_front() {
                self.groups.remove(&old);
            }
        }
        Ok(nodes)
    }

    pub(super) fn get(&self, pg_id: &PlacementGroupId) -> Option<PlacementGroupInfo> {
        self.groups.get(pg_id).cloned()
    }

    /// The group not removed that is named `name` in `namespace`.
    pub(super) fn named(&self, name: &str, namespace: &str) -> Option<PlacementGroupInfo> {
        self.groups
            .values()
            .find(|g| {
                g.state() != PlacementGroupState::Removed
                    && g.spec.as_ref().is_some_and(|s| s.name == name && s.namespace == namespace)
            })
            .cloned()
    }

    pub(super) fn all(&self) -> Vec<PlacementGroupInfo> {
        self.groups.values().cloned().collect()
    }
}

/// Checks a new group's spec: a known strategy, an id, and bundles that are each
/// non-empty resources with a label selector that parses. Returns its id.
pub(super) fn check_spec(spec: &PlacementGroupSpec) -> Result<PlacementGroupId, HeadError> {
    Strategy::from_proto(spec.strategy())?;
    let pg_id = PlacementGroupId::from_bytes(&spec.pg_id)?;
    if spec.bundles.is_empty() {
        return Err(HeadError::NoBundles);
    }
    for (index, bundle) in spec.bundles.iter().enumerate() {
        let resources =
            ResourceSet::from_map(&bundle.resources).map_err(|source| HeadError::BadBundle { index, source })?;
        if resources.is_empty() {
            return Err(HeadError::EmptyBundle(index));
        }
        LabelSelector::parse(&bundle.label_selector).map_err(|source| HeadError::BadLabelSelector { index, source })?;
    }
    Ok(pg_id)
}

impl Head {
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
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = head.retry_placement.notified() => {}
                }
                // Here rather than on each node's heartbeat: one scan per tick for the whole cluster.
                head.forget_old_dead_nodes();
                let pending = head.groups.lock().pending();
                for pg_id in pending {
                    head.place_group(pg_id).await;
                }
            }
        })
    }

    /// Records a new group (its spec checked by `check_spec`) and tries to place it
    /// now; the placement loop retries it if it does not fit yet. Returns it as it is then.
    pub(super) async fn add_group(&self, pg_id: PlacementGroupId, spec: PlacementGroupSpec) -> PlacementGroupInfo {
        self.groups.lock().add_pending(pg_id, spec);
        self.place_group(pg_id).await;
        self.groups.lock().get(&pg_id).unwrap_or_default()
    }

    /// Tries to reserve a pending group's bundles: all of them, on the nodes
    /// its strategy allows, or none.
    #[tracing::instrument(level = "debug", skip(self), fields(group = %pg_id.hex()))]
    pub(super) async fn place_group(&self, pg_id: PlacementGroupId) {
        let _one_at_a_time = self.placing.lock().await;
        let Some(spec) = self.groups.lock().pending_spec(&pg_id) else { return };
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
        if !self.reserve_and_commit(pg_id, &live, &by_node).await {
            return;
        }
        {
            let mut nodes = self.nodes.lock();
            for (node, slots) in &by_node {
                let Ok(node_id) = NodeId::from_bytes(&live[*node].node_id) else { continue };
                nodes.hold_bundles(&node_id, &pg_id, slots);
            }
        }
        let bundle_nodes = assignment.iter().map(|i| live[*i].node_id.clone()).collect();
        self.groups.lock().mark_created(&pg_id, bundle_nodes);
        self.changes.send_modify(|n| *n += 1);
    }

    /// The two phases of placing a group, `by_node` its bundles on each of `live`'s nodes.
    /// True once every node has committed; else every bundle reserved is given back.
    async fn reserve_and_commit(
        &self,
        pg_id: PlacementGroupId,
        live: &[NodeInfo],
        by_node: &[(usize, Vec<BundleSlot>)],
    ) -> bool {
        // Two phases, as in Ray: reserve on every chosen node, then commit on every one. Reserved
        // bundles run nothing, so a group given up because one node refused its share (or is
        // gone without the head knowing yet) has started nothing anywhere.
        let mut reserved: Vec<&str> = Vec::new();
        for (node, slots) in by_node {
            let address = &live[*node].address;
            let request = ReserveBundlesRequest { pg_id: pg_id.to_vec(), bundles: slots.clone() };
            let outcome = match self.bundle_agent(address).await {
                Ok(mut agent) => agent.reserve_bundles(bundle_call(request)).await.map(drop),
                Err(e) => Err(Status::unavailable(e.to_string())),
            };
            if let Err(status) = outcome {
                // Refused for room (its view here was stale) or not reached at all.
                if status.code() != Code::FailedPrecondition {
                    self.mark_unreachable(&live[*node].node_id);
                }
                self.give_back_bundles(pg_id, &reserved).await;
                return false;
            }
            reserved.push(address);
        }
        for address in &reserved {
            let request = PlacementGroupRequest { pg_id: pg_id.to_vec(), ..Default::default() };
            let committed = match self.bundle_agent(address).await {
                Ok(mut agent) => agent.commit_bundles(bundle_call(request)).await.is_ok(),
                Err(_) => false,
            };
            if !committed {
                // A node lost between the phases: the others' bundles go back, with what started in them.
                self.give_back_bundles(pg_id, &reserved).await;
                return false;
            }
        }
        true
    }

    /// The bundle service of the agent at `address` (over the head's own channels to agents).
    async fn bundle_agent(&self, address: &str) -> Result<BundleClient, ClientError> {
        let token = self.token.lock().clone();
        self.channels.bundles(address, &token).await
    }

    /// Returns a group's bundles on the agents at `addresses` (reserved or committed).
    async fn give_back_bundles(&self, pg_id: PlacementGroupId, addresses: &[&str]) {
        for address in addresses {
            if let Ok(mut agent) = self.bundle_agent(address).await {
                let request = PlacementGroupRequest { pg_id: pg_id.to_vec(), ..Default::default() };
                let _ = agent.return_bundles(bundle_call(request)).await;
            }
        }
    }

    /// Removes a group: marked removed (the last `history` are kept), its bundles
    /// given back and their names dropped from its nodes' totals.
    pub(super) async fn withdraw_group(&self, pg_id: PlacementGroupId) -> Result<(), HeadError> {
        let _one_at_a_time = self.placing.lock().await;
        let (bundle_nodes, spec) = self.groups.lock().remove(pg_id, self.history)?;
        let mut nodes = bundle_nodes.clone();
        nodes.sort();
        nodes.dedup();
        for node in nodes {
            let Ok(node_id) = NodeId::from_bytes(&node) else { continue };
            let address = self.nodes.lock().address(&node_id);
            let Some(address) = address else {
                self.nodes.lock().drop_bundles(&node_id, &pg_id);
                continue;
            };
            self.give_back_bundles(pg_id, &[&address]).await;
            // Free on the agent now: counted so here too, rather than from its next beat.
            let freed: Vec<ResourceSet> = bundle_nodes
                .iter()
                .zip(spec.iter().flat_map(|s| &s.bundles))
                .filter(|(on, _)| **on == node)
                .map(|(_, bundle)| ResourceSet::from_map(&bundle.resources).unwrap_or_default())
                .collect();
            self.nodes.lock().release_bundles(&node_id, &pg_id, &freed);
        }
        self.retry_placement.notify_one();
        Ok(())
    }

    /// Creates a placement group from within the head (a job's entrypoint
    /// resources): placed now if it fits, else by the placement loop once it does.
    pub async fn create_group(&self, spec: PlacementGroupSpec) -> Result<(), Status> {
        let pg_id = check_spec(&spec)?;
        self.add_group(pg_id, spec).await;
        Ok(())
    }

    /// Removes a group made by [`Head::create_group`], giving back its bundles.
    pub async fn remove_group(&self, pg_id: PlacementGroupId) {
        if let Err(e) = self.withdraw_group(pg_id).await {
            let e = Status::from(e);
            tracing::debug!("removing placement group {}: {e}", pg_id.hex());
        }
    }

    /// Takes over a group a previous head placed, whose bundles `node`'s agent
    /// still holds: recorded as placed there, so removing it gives them back.
    pub fn adopt_group(&self, spec: PlacementGroupSpec, node: Vec<u8>) {
        let Ok(pg_id) = PlacementGroupId::from_bytes(&spec.pg_id) else { return };
        self.groups.lock().adopt(pg_id, spec, node);
    }

    /// Every placement group the head knows, the last `history` removed ones included.
    pub fn placement_groups(&self) -> Vec<PlacementGroupInfo> {
        self.groups.lock().all()
    }

    /// The nodes a placed group's bundles are on, by bundle.
    pub fn group_nodes(&self, pg_id: PlacementGroupId) -> Vec<Vec<u8>> {
        self.groups.lock().get(&pg_id).map(|g| g.bundle_nodes).unwrap_or_default()
    }

    /// The state of a placement group (`None` when unknown).
    pub fn group_state(&self, pg_id: PlacementGroupId) -> Option<PlacementGroupState> {
        self.groups.lock().get(&pg_id).map(|g| g.state())
    }
}
