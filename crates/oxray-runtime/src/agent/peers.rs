//! Links between node agents: an owner node forwards tasks over one ordered
//! stream per peer and gets completions and actor changes back; object bytes
//! are pulled in chunks on request.

use super::state::Reservation;
use super::{AgentError, AgentShared, CopyError, object_ids};
use crate::client::{AgentChannels, ClientError, PeerClient};
use crate::clock;
use crate::ids::{ActorId, JobId, NodeId, ObjectId, TaskId};
use oxray_object_store::{ObjectPlace, Reserved};
use oxray_proto::{
    ActorRequest, CancelRequest, Empty, JobEnded, ObjectChunk, PeerEvent, PeerHello, PeerMessage, PullRequest,
    RefDeltas, TaskKind, TaskSpec, peer_event, peer_message,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;

use super::state::{Action, AgentState};

/// Bytes per streamed chunk of an object.
const CHUNK: usize = 4 << 20;
/// Copies up to this size are kept inline rather than in the arena.
const INLINE_COPY_MAX: usize = 64 << 10;

/// Events back to an owner node on its link. Unbounded (sent from `run_actions`
/// and the link's reader, which must not wait): one `Done` per task the owner
/// forwarded here, which stays in this node's task table until then, and one per
/// state change of an actor hosted for it. Dropped when the link ends.
pub(super) type EventSender = UnboundedSender<Result<PeerEvent, Status>>;

#[derive(Default)]
pub(crate) struct PeerLinks {
    /// Links this node opened to nodes it forwards tasks to.
    outgoing: Mutex<HashMap<NodeId, UnboundedSender<PeerMessage>>>,
    /// Links other nodes opened to this one: where their events go.
    incoming: Mutex<HashMap<NodeId, EventSender>>,
    pub(super) channels: AgentChannels,
}

impl PeerLinks {
    /// Forgets the link to `node` (it came back): the next message to it opens a new one.
    pub(crate) fn reset(&self, node: NodeId) {
        self.outgoing.lock().remove(&node);
    }

    pub(crate) fn send_event(&self, owner: NodeId, event: PeerEvent) {
        if let Some(tx) = self.incoming.lock().get(&owner) {
            let _ = tx.send(Ok(event));
        }
    }
}

impl AgentShared {
    pub(super) fn token(&self) -> String {
        self.spawn.lock().as_ref().map(|c| c.token.clone()).unwrap_or_default()
    }

    async fn peer_client(&self, address: &str) -> Result<PeerClient, ClientError> {
        self.peers.channels.peer(address, &self.token()).await
    }

    /// Queues the state's messages for other nodes on their links (opening a
    /// link on first use) and returns the other actions.
    pub(super) fn send_to_peers(self: &Arc<Self>, st: &AgentState, actions: Vec<Action>) -> Vec<Action> {
        let mut rest = Vec::new();
        for action in actions {
            let (node, msg) = match action {
                Action::ResetPeerLink { node } => {
                    // In order: what the state queued for the node after this goes on a new link.
                    self.peers.reset(node);
                    continue;
                }
                Action::Forward { node, task } => (node, peer_message::Msg::Task(*task)),
                Action::ReleaseRemote { node, id } => {
                    (node, peer_message::Msg::Refs(RefDeltas { decref: vec![id.to_vec()], ..Default::default() }))
                }
                Action::PeerCancel { node, object_id, force, recursive } => {
                    (node, peer_message::Msg::Cancel(CancelRequest { object_id: object_id.to_vec(), force, recursive }))
                }
                Action::PeerKillActor { node, actor_id, no_restart } => {
                    (node, peer_message::Msg::KillActor(ActorRequest { actor_id: actor_id.to_vec(), no_restart }))
                }
                Action::PeerJobEnded { node, job } => {
                    (node, peer_message::Msg::JobEnded(JobEnded { job_id: job.to_vec() }))
                }
                other => {
                    rest.push(other);
                    continue;
                }
            };
            if let Some(link) = self.link_to(st, node) {
                let _ = link.send(PeerMessage { msg: Some(msg) });
            }
        }
        rest
    }

    fn link_to(self: &Arc<Self>, st: &AgentState, node: NodeId) -> Option<UnboundedSender<PeerMessage>> {
        let mut links = self.peers.outgoing.lock();
        if let Some(tx) = links.get(&node).filter(|tx| !tx.is_closed()) {
            return Some(tx.clone());
        }
        let address = st.peer_address(&node)?;
        // Unbounded: `send_to_peers` runs with the state lock held, so it cannot wait
        // for room, and dropping a message would lose work. Each message stands for
        // state this node keeps until the peer answers or the link ends: a forwarded
        // task or call (`Forwarded(node)` in the task table), a release (once per freed
        // object that had a copy there), a cancel, a kill or a job end. A peer that
        // stops reading leaves no more queued here than those tables hold, and the
        // queue goes when the link ends (`run_link` returns and drops `rx`).
        let (tx, rx) = unbounded_channel();
        let hello = PeerHello { node_id: st.node_id.to_vec(), address: st.address.clone() };
        let _ = tx.send(PeerMessage { msg: Some(peer_message::Msg::Hello(hello)) });
        links.insert(node, tx.clone());
        let this = self.clone();
        let link = tx.clone();
        tokio::spawn(async move {
            let reason = this.run_link(node, &address, rx).await;
            let current = {
                let mut links = this.peers.outgoing.lock();
                let current = links.get(&node).is_some_and(|tx| tx.same_channel(&link));
                if current {
                    links.remove(&node);
                }
                current
            };
            // A link replaced since (the node came back) ends without a word: the node lives on.
            if current && !this.state.lock().is_shutting_down() {
                this.with_state(|st| st.node_died(node, &reason, clock::now_ms()));
            }
        });
        Some(tx)
    }

    /// Runs one outgoing link until it ends; returns why it ended.
    async fn run_link(
        self: &Arc<Self>,
        node: NodeId,
        address: &str,
        outgoing: tokio::sync::mpsc::UnboundedReceiver<PeerMessage>,
    ) -> String {
        let mut client = match self.peer_client(address).await {
            Ok(c) => c,
            Err(e) => return format!("it cannot be reached: {e}"),
        };
        let mut events = match client.peer_link(UnboundedReceiverStream::new(outgoing)).await {
            Ok(reply) => reply.into_inner(),
            Err(status) => return format!("it refused a link: {}", status.message()),
        };
        loop {
            match events.message().await {
                Ok(Some(PeerEvent { event: Some(event) })) => {
                    let outcome = match event {
                        peer_event::Event::Done(done) => {
                            self.with_state(|st| st.remote_task_done(node, done, clock::now_ms()))
                        }
                        peer_event::Event::Actor(info) => {
                            self.with_state(|st| st.remote_actor_state(node, info, clock::now_ms()))
                        }
                    };
                    if let Err(e) = outcome {
                        tracing::warn!("bad event from node {node}: {e}");
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return "its connection closed".into(),
                Err(status) => return format!("its connection failed: {}", status.message()),
            }
        }
    }

    /// Serves one owner node's link: applies its messages in order.
    pub(super) fn serve_link(
        self: &Arc<Self>,
        owner: NodeId,
        mut incoming: tonic::Streaming<PeerMessage>,
        events: EventSender,
    ) {
        self.peers.incoming.lock().insert(owner, events.clone());
        self.with_state(|st| st.peer_connected(owner));
        let this = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(message)) = incoming.message().await {
                if let Err(status) = this.apply_peer_message(owner, message) {
                    tracing::warn!("bad message from node {owner}: {status}");
                }
            }
            {
                let mut incoming = this.peers.incoming.lock();
                if incoming.get(&owner).is_some_and(|tx| tx.same_channel(&events)) {
                    incoming.remove(&owner);
                }
            }
            this.with_state(|st| st.peer_gone(owner, clock::now_ms()));
        });
    }

    fn apply_peer_message(self: &Arc<Self>, owner: NodeId, message: PeerMessage) -> Result<(), AgentError> {
        match message.msg {
            Some(peer_message::Msg::Task(forward)) => {
                let task_id = forward.spec.as_ref().map(|s| s.task_id.clone()).unwrap_or_default();
                let task_id = TaskId::from_bytes(&task_id)?;
                let return_ids = self.with_state(|st| st.accept_forward(owner, forward, clock::now_ms()))?;
                if !return_ids.is_empty() {
                    let this = self.clone();
                    tokio::spawn(async move {
                        // Its returns are made here: a return the owner already passed on
                        // (nested in another task's result) reads as ready before that.
                        this.wait_for_state(|st| !st.has_task(&task_id)).await;
                        if let Some(done) =
                            this.with_state(|st| st.remote_done_for(owner, task_id, &return_ids, clock::now_ms()))
                        {
                            this.peers.send_event(owner, PeerEvent { event: Some(peer_event::Event::Done(done)) });
                        }
                    });
                }
            }
            Some(peer_message::Msg::Refs(deltas)) => {
                let released = object_ids(&deltas.decref)?;
                self.with_state(|st| st.remove_holders(owner.into(), &released, clock::now_ms()));
            }
            Some(peer_message::Msg::Cancel(req)) => {
                let id = ObjectId::from_bytes(&req.object_id)?;
                self.with_state(|st| {
                    let now_ms = clock::now_ms();
                    st.cancel(id, req.force, req.recursive, now_ms);
                    st.schedule(now_ms);
                });
            }
            Some(peer_message::Msg::KillActor(req)) => {
                let id = ActorId::from_bytes(&req.actor_id)?;
                let _ = self.with_state(|st| st.kill_actor(id, req.no_restart, clock::now_ms()));
            }
            Some(peer_message::Msg::JobEnded(req)) => {
                let job = JobId::from_bytes(&req.job_id)?;
                self.with_state(|st| st.job_ended_elsewhere(job, owner, clock::now_ms()));
            }
            Some(peer_message::Msg::Hello(_)) | None => {
                return Err(AgentError::Malformed("a peer link sent a second hello or an empty message"));
            }
        }
        Ok(())
    }

    /// Copies an object from another node into this node's store.
    pub(super) async fn pull(self: Arc<Self>, id: ObjectId, address: String) {
        let outcome = self.copy_from(id, &address).await;
        self.with_state(|st| st.pull_finished(id, outcome, clock::now_ms()));
    }

    async fn copy_from(self: &Arc<Self>, id: ObjectId, address: &str) -> Result<Option<Vec<u8>>, CopyError> {
        let fail = |reason: String| CopyError::Failed { id, address: address.to_string(), reason };
        let mut client = self.peer_client(address).await.map_err(|e| fail(e.to_string()))?;
        let request = PullRequest { object_id: id.to_vec() };
        let mut chunks = client.pull_object(request).await.map_err(|s| fail(s.message().to_string()))?.into_inner();
        let next = |r: Result<Option<ObjectChunk>, Status>| r.map_err(|s| fail(s.message().to_string()));
        let first = next(chunks.message().await)?.ok_or_else(|| fail("the stream was empty".into()))?;
        if first.missing {
            return Err(CopyError::Missing(String::from_utf8_lossy(&first.data).into_owned()));
        }
        let total = first.total_size as usize;
        if total <= INLINE_COPY_MAX {
            let mut data = first.data;
            while let Some(chunk) = next(chunks.message().await)? {
                data.extend_from_slice(&chunk.data);
            }
            return if data.len() == total { Ok(Some(data)) } else { Err(fail("the stream ended early".into())) };
        }
        self.reserving(total, |st, may_spill| match st.store_mut().reserve(id, total, may_spill) {
            Ok(Reserved::Placed(_)) => Ok(Reservation::Done(())),
            Ok(Reserved::SpillFirst(jobs)) => Ok(Reservation::SpillFirst(jobs)),
            Err(source) => Err(AgentError::StoreFull { size: total, source }),
        })
        .await
        .map_err(|e| fail(format!("no room here: {e}")))?;
        let mut offset = 0;
        let mut chunk = Some(first);
        while let Some(c) = chunk {
            self.state.lock().store_mut().write_unsealed(&id, offset, &c.data).map_err(|e| fail(e.to_string()))?;
            offset += c.data.len();
            chunk = next(chunks.message().await)?;
        }
        if offset != total {
            return Err(fail(format!("the stream ended after {offset} of {total} bytes")));
        }
        Ok(None)
    }

    /// Streams an object's bytes to another node.
    pub(super) fn serve_pull(
        self: &Arc<Self>,
        id: ObjectId,
    ) -> tokio::sync::mpsc::Receiver<Result<ObjectChunk, Status>> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let this = self.clone();
        tokio::spawn(async move {
            // An object this node owns may be asked for before it is made (its ref
            // travelled nested in another result): serve it once it is.
            this.wait_for_state(|st| !st.awaits_its_task(&id)).await;
            let found = {
                let mut st = this.state.lock();
                let found = st.store_mut().lookup(&id);
                if let Some((ObjectPlace::Arena { .. }, _)) = &found {
                    // Keeps the range from being reused or spilled while it streams.
                    st.store_mut().add_reader(&id);
                }
                found
            };
            let Some((place, size)) = found else {
                let node = this.state.lock().node_id.short();
                let message = format!("Object {id} is not on node {node} (freed, or lost)");
                let _ = tx.send(Ok(ObjectChunk { total_size: 0, data: message.into_bytes(), missing: true })).await;
                return;
            };
            let file = match &place {
                ObjectPlace::Spilled(path) => std::fs::File::open(path).ok(),
                _ => None,
            };
            let mut offset = 0;
            loop {
                let len = CHUNK.min(size - offset);
                let data = match &place {
                    ObjectPlace::Inline(bytes) => bytes[offset..offset + len].to_vec(),
                    ObjectPlace::Arena { offset: base, .. } => {
                        this.state.lock().store_mut().read_arena(base + offset, len)
                    }
                    ObjectPlace::Spilled(_) => {
                        use std::os::unix::fs::FileExt;
                        let mut buf = vec![0; len];
                        match file.as_ref().map(|f| f.read_exact_at(&mut buf, offset as u64)) {
                            Some(Ok(())) => buf,
                            _ => break,
                        }
                    }
                };
                let chunk = ObjectChunk { total_size: if offset == 0 { size as u64 } else { 0 }, data, missing: false };
                if tx.send(Ok(chunk)).await.is_err() {
                    break;
                }
                offset += len;
                if offset >= size {
                    break;
                }
            }
            if matches!(place, ObjectPlace::Arena { .. }) {
                this.state.lock().store_mut().remove_reader(&id);
            }
        });
        rx
    }

    /// Waits until every ready object in `ids` has its bytes on this node, copying them in.
    pub(super) async fn wait_local(self: &Arc<Self>, ids: &[ObjectId], deadline: Option<Instant>) -> bool {
        // The common case, everything already here, costs one lock and no wake-ups.
        if self.state.lock().all_local_or_settled(ids) {
            return true;
        }
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.with_state(|st| st.fetch_remote(ids)) == 0 {
                return true;
            }
            if !super::notified_before(notified, deadline).await {
                return false;
            }
        }
    }

    /// Before submitting: learn where unknown actors live, and refresh the node
    /// table when a request fits no node this one knows of.
    pub(super) async fn learn_before_submit(self: &Arc<Self>, specs: &[TaskSpec]) {
        let Some(mut head) = self.head() else { return };
        let (unknown_actors, refresh) = {
            let st = self.state.lock();
            let mut unknown: Vec<Vec<u8>> = Vec::new();
            let mut refresh = false;
            for spec in specs {
                if spec.kind == TaskKind::ActorTask as i32 {
                    let known = ActorId::from_bytes(&spec.actor_id).is_ok_and(|a| st.actor(&a).is_some());
                    if !known && !unknown.contains(&spec.actor_id) {
                        unknown.push(spec.actor_id.clone());
                    }
                } else {
                    refresh |= super::state::requests_of(spec).is_ok_and(|(_, r)| !st.feasible_anywhere(&r));
                }
            }
            (unknown, refresh)
        };
        if refresh && let Ok(reply) = head.list_nodes(Empty {}).await {
            self.with_state(|st| st.update_peers(&reply.into_inner().nodes, clock::now_ms()));
        }
        for actor_id in unknown_actors {
            let Ok(reply) = head.get_actor(ActorRequest { actor_id, ..Default::default() }).await else { continue };
            // A dead one too: its calls then fail with the cause the head recorded.
            if let Some(info) = reply.into_inner().actor {
                let _ = self.with_state(|st| st.add_actor_proxy(&info));
            }
        }
    }
}
