//! The head's actor table: every actor agents registered, the names of the live
//! ones (unique per namespace across the cluster), and the last dead ones; plus
//! failing the actors of nodes that did not come back after a restart.

use super::store::{HeadStore, StoreError};
use super::{Head, HeadError, History, history_limit};
use crate::ids::{ActorId, IdError, NodeId};
use oxray_proto::{ActorInfo, ActorState, NodeInfo};
use std::collections::{HashMap, HashSet, VecDeque};

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

/// What a registration under a name found.
pub(super) enum NameClaim {
    /// The name was free (or the actor has none): it is the new actor's now.
    Claimed,
    /// A live actor already has it.
    Taken(ActorId),
}

#[derive(Default)]
pub(super) struct ActorTable {
    actors: HashMap<ActorId, ActorInfo>,
    /// (namespace, name) -> actor id, for live named actors.
    names: HashMap<(String, String), ActorId>,
    /// Dead actors, oldest first: only the last `History` of them are kept.
    dead: VecDeque<ActorId>,
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

    /// An actor loaded from redb: its name taken again if it is alive. Returns
    /// the dead actors now forgotten.
    pub(super) fn load(&mut self, actor: ActorInfo, keep: History) -> Result<Vec<ActorId>, IdError> {
        let id = ActorId::from_bytes(&actor.actor_id)?;
        if actor.state() != ActorState::Dead && !actor.name.is_empty() {
            self.names.insert((actor.namespace.clone(), actor.name.clone()), id);
        }
        let dead = actor.state() == ActorState::Dead;
        self.actors.insert(id, actor);
        Ok(if dead { self.note_dead(id, keep) } else { Vec::new() })
    }

    /// Takes `namespace`/`name` for `id`, unless a live actor has it.
    pub(super) fn claim_name(&mut self, namespace: &str, name: &str, id: ActorId) -> NameClaim {
        let key = (namespace.to_string(), name.to_string());
        if let Some(existing) = self.names.get(&key) {
            return NameClaim::Taken(*existing);
        }
        self.names.insert(key, id);
        NameClaim::Claimed
    }

    /// Gives back whatever name `id` holds (its registration failed).
    pub(super) fn release_names_of(&mut self, id: ActorId) {
        self.names.retain(|_, held| *held != id);
    }

    /// Records a newly registered actor.
    pub(super) fn insert(&mut self, id: ActorId, info: ActorInfo) {
        self.actors.insert(id, info);
    }

    /// An update from an agent that only routes to the actor lacks where it came
    /// from: filled in from the head's record.
    pub(super) fn fill_in(&self, id: &ActorId, info: &mut ActorInfo) {
        if !info.job_id.is_empty() {
            return;
        }
        if let Some(known) = self.actors.get(id) {
            info.job_id.clone_from(&known.job_id);
            info.detached = known.detached;
            if info.resources.is_empty() {
                info.resources.clone_from(&known.resources);
            }
            if info.placement_group_id.is_empty() {
                info.placement_group_id.clone_from(&known.placement_group_id);
            }
        }
    }

    /// Records an actor's new state: a dead one frees its name, one alive again
    /// takes it back if free. Returns the dead actors now forgotten.
    pub(super) fn update(&mut self, id: ActorId, info: ActorInfo, keep: History) -> Vec<ActorId> {
        let dead = info.state() == ActorState::Dead;
        if !info.name.is_empty() {
            let key = (info.namespace.clone(), info.name.clone());
            if dead {
                if self.names.get(&key) == Some(&id) {
                    self.names.remove(&key);
                }
            } else {
                // Its owner restarted it after the head had given it up for dead
                // (its node went with an earlier head): the name is its again if free.
                self.names.entry(key).or_insert(id);
            }
        }
        if !dead {
            // Alive again: it must not be forgotten as one of the dead.
            self.dead.retain(|d| *d != id);
        }
        self.actors.insert(id, info);
        if dead { self.note_dead(id, keep) } else { Vec::new() }
    }

    /// Marks dead the actors on `nodes` that are not already, freeing their names.
    /// Returns their records and the dead actors now forgotten.
    fn fail_on(&mut self, nodes: &[NodeId], keep: History) -> (Vec<ActorInfo>, Vec<ActorId>) {
        let mut failed = Vec::new();
        for (id, actor) in self.actors.iter_mut() {
            let Ok(node) = NodeId::from_bytes(&actor.node_id) else { continue };
            if actor.state() == ActorState::Dead || !nodes.contains(&node) {
                continue;
            }
            actor.set_state(ActorState::Dead);
            actor.death_cause = format!(
                "The actor {} died because its node {} did not come back after the head restarted",
                actor.class_name,
                node.short()
            );
            let key = (actor.namespace.clone(), actor.name.clone());
            if self.names.get(&key) == Some(id) {
                self.names.remove(&key);
            }
            failed.push(actor.clone());
        }
        let mut forgotten = Vec::new();
        for actor in &failed {
            if let Ok(id) = ActorId::from_bytes(&actor.actor_id) {
                forgotten.extend(self.note_dead(id, keep));
            }
        }
        (failed, forgotten)
    }

    pub(super) fn get(&self, id: &ActorId) -> Option<ActorInfo> {
        self.actors.get(id).cloned()
    }

    /// The live actor named `name` in `namespace`.
    pub(super) fn named(&self, namespace: String, name: String) -> Option<ActorInfo> {
        self.names.get(&(namespace, name)).and_then(|id| self.actors.get(id)).cloned()
    }

    /// Every actor the table holds, the kept dead ones included.
    pub(super) fn all(&self) -> Vec<ActorInfo> {
        self.actors.values().cloned().collect()
    }

    /// The nodes hosting a live actor.
    pub(super) fn hosting_nodes(&self) -> HashSet<Vec<u8>> {
        self.actors.values().filter(|a| a.state != ActorState::Dead as i32).map(|a| a.node_id.clone()).collect()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.actors.len()
    }

    #[cfg(test)]
    pub(super) fn clear(&mut self) {
        self.actors.clear();
    }

    #[cfg(test)]
    pub(super) fn has_name(&self, namespace: &str, name: &str) -> bool {
        self.names.contains_key(&(namespace.to_string(), name.to_string()))
    }
}

impl Head {
    /// Every actor the head knows, the last `history` dead ones included.
    pub fn actors(&self) -> Vec<ActorInfo> {
        self.actors.lock().all()
    }

    /// Registers a new actor, under its name if it has one: `Ok(Some(existing))`
    /// when the name is taken and `get_if_exists` asks for that actor instead.
    pub(super) async fn add_actor(
        &self,
        actor_id: ActorId,
        actor: ActorInfo,
        get_if_exists: bool,
    ) -> Result<Option<ActorId>, HeadError> {
        if !actor.name.is_empty() {
            // The name is taken now; the commit below runs without the table's lock.
            let claim = self.actors.lock().claim_name(&actor.namespace, &actor.name, actor_id);
            if let NameClaim::Taken(existing) = claim {
                if get_if_exists {
                    return Ok(Some(existing));
                }
                return Err(HeadError::NameTaken { name: actor.name, namespace: actor.namespace });
            }
        }
        if let Err(e) = self.persist_actor(actor.clone()).await {
            self.actors.lock().release_names_of(actor_id);
            return Err(e);
        }
        self.actors.lock().insert(actor_id, actor);
        Ok(None)
    }

    /// Records an actor's state change, written through first.
    pub(super) async fn record_actor(&self, actor_id: ActorId, mut info: ActorInfo) -> Result<(), HeadError> {
        self.actors.lock().fill_in(&actor_id, &mut info);
        self.persist_actor(info.clone()).await?;
        let forgotten = self.actors.lock().update(actor_id, info, self.dead_actors);
        self.forget(Vec::new(), forgotten);
        Ok(())
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

    /// Marks dead the actors of nodes that are not alive (silent for
    /// `NODE_TIMEOUT`), freeing their names: after a restart nobody else will.
    pub(super) async fn fail_actors_of_silent_nodes(&self) -> Result<(), HeadError> {
        let silent = self.nodes.lock().silent();
        let (failed, forgotten) = self.actors.lock().fail_on(&silent, self.dead_actors);
        // Written after the table's lock is released: a commit may wait on the disk.
        for actor in failed {
            self.persist_actor(actor).await?;
        }
        self.forget(Vec::new(), forgotten);
        Ok(())
    }
}

/// The head's own node agent runs in its process, so a head node on record is an
/// earlier run of this one: the actors it hosted went with it. They are marked
/// dead (their owners, if elsewhere, may still restart them), so callers get
/// `ActorDiedError` instead of waiting on a node that is gone.
pub(super) fn fail_actors_of_previous_head(
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
