//! Objects on this node: the store that holds their bytes, who holds and pins
//! each one, which readers view which arena range, and copies arriving from
//! other nodes. An object is freed once nothing holds, pins or produces it.

use super::{Action, AgentState, TaskState};
use crate::agent::AgentError;
use crate::errors::{FLAG_APPLICATION_ERROR, FLAG_SYSTEM_ERROR, SystemErrorKind, system_error_object};
use crate::ids::{ActorId, ClientId, NodeId, ObjectId};
use oxray_object_store::{ObjectPlace, ObjectStore, Reserved, SpillJob};
use oxray_proto::object_location::Place;
use oxray_proto::{ObjectLocation, TaskKind};
use std::collections::{HashMap, HashSet};

/// A reservation, or the spills to carry out (outside the state lock) before asking again.
#[derive(Debug)]
pub enum Reservation<T> {
    Done(T),
    SpillFirst(Vec<SpillJob>),
}

#[derive(Debug, Default)]
pub(super) struct ObjectMeta {
    /// Clients (drivers, workers, owner nodes) that hold a reference.
    pub(super) holders: HashSet<ClientId>,
    /// Queued or running tasks that use it as an argument, and objects that contain it.
    pub(super) pins: u32,
    /// Objects referenced inside this one: pinned while it lives.
    pub(super) nested: Vec<ObjectId>,
    pub(super) ready: bool,
    /// A copy on another node: where to pull it from.
    pub(super) remote: Option<RemoteCopy>,
}

#[derive(Debug, Clone)]
pub(super) struct RemoteCopy {
    pub(super) node: NodeId,
    pub(super) address: String,
    /// Its size in bytes, when that node said (0: unknown).
    pub(super) size: u64,
    /// That node holds the copy for this one: release it when freed here.
    pub(super) held: bool,
}

/// The node's objects: their bytes (the store) and what keeps each alive.
pub(super) struct ObjectTable {
    store: ObjectStore,
    meta: HashMap<ObjectId, ObjectMeta>,
    /// Arena views handed to each client and not yet released.
    views: HashMap<ClientId, HashMap<ObjectId, u32>>,
    /// Objects being copied in from another node.
    pulling: HashSet<ObjectId>,
}

impl ObjectTable {
    pub(super) fn new(store: ObjectStore) -> Self {
        ObjectTable { store, meta: HashMap::new(), views: HashMap::new(), pulling: HashSet::new() }
    }

    pub(super) fn store(&self) -> &ObjectStore {
        &self.store
    }

    pub(super) fn store_mut(&mut self) -> &mut ObjectStore {
        &mut self.store
    }

    pub(super) fn get(&self, id: &ObjectId) -> Option<&ObjectMeta> {
        self.meta.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &ObjectId) -> Option<&mut ObjectMeta> {
        self.meta.get_mut(id)
    }

    /// The object's record, created empty (not ready, unheld) if it is new.
    pub(super) fn entry(&mut self, id: ObjectId) -> &mut ObjectMeta {
        self.meta.entry(id).or_default()
    }

    pub(super) fn contains_key(&self, id: &ObjectId) -> bool {
        self.meta.contains_key(id)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&ObjectId, &ObjectMeta)> {
        self.meta.iter()
    }

    fn remove(&mut self, id: &ObjectId) -> Option<ObjectMeta> {
        self.meta.remove(id)
    }

    /// Marks a copy from another node as under way; false if it already is.
    pub(super) fn start_pull(&mut self, id: ObjectId) -> bool {
        self.pulling.insert(id)
    }

    pub(super) fn end_pull(&mut self, id: &ObjectId) {
        self.pulling.remove(id);
    }

    pub(super) fn is_pulling(&self, id: &ObjectId) -> bool {
        self.pulling.contains(id)
    }

    /// Releases every arena view `client` still has (it exited).
    pub(super) fn release_all_views(&mut self, client: ClientId) {
        for (id, n) in self.views.remove(&client).unwrap_or_default() {
            for _ in 0..n {
                self.store.remove_reader(&id);
            }
        }
    }
}

pub(super) fn location(id: ObjectId, place: ObjectPlace, size: usize, arena: &std::path::Path) -> ObjectLocation {
    let place = match place {
        ObjectPlace::Inline(data) => Place::InlineData((*data).clone()),
        ObjectPlace::Spilled(p) => Place::Path(p.to_string_lossy().into_owned()),
        ObjectPlace::Arena { offset, .. } => {
            Place::Arena(oxray_proto::ArenaRange { path: arena.to_string_lossy().into_owned(), offset: offset as u64 })
        }
    };
    ObjectLocation { object_id: id.to_vec(), place: Some(place), size: size as u64 }
}

impl AgentState {
    /// Applies one client's reference changes: increfs now, decrefs after the
    /// caller has pinned whatever the same request needs.
    pub fn add_holders(&mut self, client: ClientId, ids: &[ObjectId]) {
        // A request that arrives after its driver's session ended holds nothing.
        if self.drivers.has_ended(&client) {
            return;
        }
        for id in ids {
            self.objects.entry(*id).holders.insert(client);
            if let Some(w) = self.workers.get_mut(&client.as_worker()) {
                w.held_refs.insert(*id);
            }
        }
    }

    pub fn remove_holders(&mut self, client: ClientId, ids: &[ObjectId], now_ms: u64) {
        for id in ids {
            if let Some(meta) = self.objects.get_mut(id) {
                meta.holders.remove(&client);
            }
            if let Some(w) = self.workers.get_mut(&client.as_worker()) {
                w.held_refs.remove(id);
            }
            self.maybe_free(*id, now_ms);
        }
    }

    pub(super) fn pin(&mut self, id: ObjectId) {
        self.objects.entry(id).pins += 1;
    }

    pub(super) fn unpin(&mut self, id: ObjectId, now_ms: u64) {
        if let Some(meta) = self.objects.get_mut(&id) {
            meta.pins = meta.pins.saturating_sub(1);
        }
        self.maybe_free(id, now_ms);
    }

    pub(super) fn maybe_free(&mut self, id: ObjectId, now_ms: u64) {
        let Some(meta) = self.objects.get(&id) else { return };
        if !meta.holders.is_empty() || meta.pins > 0 {
            return;
        }
        // A return object whose task is still queued or running stays until the
        // task ends, so its result is not written into a freed id.
        if !meta.ready && self.tasks.produces_pending(&id) {
            return;
        }
        let meta = self.objects.remove(&id).expect("checked above");
        self.objects.store_mut().free(&id);
        if let Some(copy) = meta.remote.filter(|c| c.held) {
            self.actions.push(Action::ReleaseRemote { node: copy.node, id });
        }
        self.tasks.clear_producer(&id);
        for nested in meta.nested {
            self.unpin(nested, now_ms);
        }
        if let Some(actor_id) = self.handle_tokens.remove(&id) {
            self.reclaim_actor(actor_id, now_ms);
        }
    }

    /// Records a sealed object (inline bytes or a file already reserved) and
    /// wakes whatever was waiting for it.
    pub fn seal_object(&mut self, loc: &ObjectLocation, nested: &[ObjectId], now_ms: u64) -> Result<(), AgentError> {
        let id = ObjectId::from_bytes(&loc.object_id)?;
        match &loc.place {
            Some(Place::InlineData(data)) => self.objects.store_mut().insert_inline(id, data.clone()),
            Some(Place::Path(_)) | Some(Place::Arena(_)) => {
                if !self.objects.store_mut().seal(&id) {
                    return Err(AgentError::NotReserved(id));
                }
            }
            None => {
                return Err(AgentError::Malformed("an object location needs inline data, a path or an arena range"));
            }
        }
        for n in nested {
            self.pin(*n);
        }
        let meta = self.objects.entry(id);
        meta.nested.extend_from_slice(nested);
        meta.ready = true;
        self.on_object_ready(id, now_ms);
        Ok(())
    }

    pub(super) fn store_error(&mut self, id: ObjectId, kind: SystemErrorKind, message: &str, now_ms: u64) {
        self.objects.store_mut().insert_inline(id, system_error_object(kind, message));
        let meta = self.objects.entry(id);
        meta.ready = true;
        self.on_object_ready(id, now_ms);
    }

    pub(super) fn on_object_ready(&mut self, id: ObjectId, now_ms: u64) {
        if self.holds_error(&id) {
            self.errors_ready += 1;
        }
        let Some(waiting) = self.tasks.take_waiters(&id) else { return };
        let mut touched_actors = Vec::new();
        for task_id in waiting {
            let Some(task) = self.tasks.get_mut(&task_id) else { continue };
            task.missing_args.remove(&id);
            if !task.missing_args.is_empty() {
                continue;
            }
            if task.spec.kind == TaskKind::ActorTask as i32 {
                touched_actors.push(ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default());
            } else if task.state == TaskState::WaitingArgs {
                task.state = TaskState::Ready;
                self.push_ready(task_id);
            }
        }
        for actor in touched_actors {
            self.dispatch_actor(actor, now_ms);
        }
        // Freed while nobody held it? (e.g. a return whose ref was dropped early)
        self.maybe_free(id, now_ms);
    }

    /// Ready here or on another node.
    pub fn is_ready(&self, id: &ObjectId) -> bool {
        self.objects
            .get(id)
            .is_some_and(|m| m.ready && (m.remote.is_some() || self.objects.store().contains_sealed(id)))
    }

    /// Ready, with its bytes in this node's store.
    pub fn is_local(&self, id: &ObjectId) -> bool {
        self.objects.get(id).is_some_and(|m| m.ready) && self.objects.store().contains_sealed(id)
    }

    /// Arena views a client dropped: their ranges may be reused once freed.
    pub fn release_views(&mut self, client: ClientId, ids: &[ObjectId]) {
        for id in ids {
            if let Some(views) = self.objects.views.get_mut(&client)
                && let Some(n) = views.get_mut(id)
            {
                *n -= 1;
                if *n == 0 {
                    views.remove(id);
                }
                self.objects.store_mut().remove_reader(id);
            }
        }
    }

    /// The object's location for `reader`, or an object-lost error object when
    /// it is gone. An arena location counts as a view until `reader` releases it.
    pub fn locate(&mut self, id: ObjectId, reader: ClientId) -> ObjectLocation {
        let arena = self.objects.store().arena_path().to_path_buf();
        match self.objects.store_mut().lookup(&id) {
            Some((place, size)) => {
                // A driver already gone will never release a view (a get that finished after its end).
                if matches!(place, ObjectPlace::Arena { .. }) && !self.drivers.has_ended(&reader) {
                    self.objects.store_mut().add_reader(&id);
                    *self.objects.views.entry(reader).or_default().entry(id).or_insert(0) += 1;
                }
                location(id, place, size, &arena)
            }
            None => {
                let blob = system_error_object(
                    SystemErrorKind::ObjectLost,
                    &format!(
                        "Object {} is lost: no reference kept it alive on node {}, or it was freed",
                        id.hex(),
                        self.node_id.hex()
                    ),
                );
                let size = blob.len();
                location(id, ObjectPlace::Inline(std::sync::Arc::new(blob)), size, &arena)
            }
        }
    }

    /// Whether `id` is here and holds a failed task's error (its header says so), so a
    /// get of several objects may raise it without waiting for the rest.
    pub fn holds_error(&self, id: &ObjectId) -> bool {
        self.objects
            .store()
            .flags(id)
            .is_some_and(|flags| flags == FLAG_APPLICATION_ERROR || flags == FLAG_SYSTEM_ERROR)
    }

    /// How many error objects have become ready here so far: a get that stops at errors
    /// looks for one among its objects only when this has moved.
    pub fn errors_ready(&self) -> u64 {
        self.errors_ready
    }

    /// Whether a get/wait on `id` returns now: it is ready, or unknown (and so
    /// comes back as an object-lost error rather than waiting forever).
    pub fn is_settled(&self, id: &ObjectId) -> bool {
        self.is_ready(id) || !self.is_known(id)
    }

    /// Whether `id` will ever become ready: known to the store, or produced by a live task.
    pub fn is_known(&self, id: &ObjectId) -> bool {
        self.objects.contains_key(id)
    }

    /// Where a writer should put a new `size`-byte object, or the spills that must
    /// happen first (the caller copies them outside the lock, then calls
    /// `finish_spills` and asks again; `may_spill` false after a few rounds).
    pub fn reserve_object(
        &mut self,
        id: ObjectId,
        size: usize,
        may_spill: bool,
    ) -> Result<Reservation<ObjectLocation>, AgentError> {
        if self.is_local(&id) {
            return Err(AgentError::AlreadySealed(id));
        }
        let reserved = self
            .objects
            .store_mut()
            .reserve(id, size, may_spill)
            .map_err(|source| AgentError::StoreFull { size, source })?;
        match reserved {
            Reserved::SpillFirst(jobs) => Ok(Reservation::SpillFirst(jobs)),
            Reserved::Placed(place) => {
                self.objects.entry(id);
                let arena = self.objects.store().arena_path().to_path_buf();
                Ok(Reservation::Done(location(id, place, size, &arena)))
            }
        }
    }

    /// Records spills carried out for a reservation of `size` bytes.
    pub fn finish_spills(&mut self, size: usize, done: Vec<(SpillJob, std::io::Result<()>)>) -> Result<(), AgentError> {
        let mut failed = None;
        for (job, copied) in done {
            match self.objects.store_mut().finish_spill(job, copied) {
                Ok(Some(s)) => self.actions.push(Action::debug(format!(
                    "spilled object {} ({} MiB) to {}",
                    s.object_id.hex(),
                    s.size >> 20,
                    s.to.display()
                ))),
                Ok(None) => {}
                Err(source) => failed = Some(AgentError::StoreFull { size, source }),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}
