//! Drivers that joined this node by address, and what their end cleans up.
//!
//! A joined driver holds a session (`DriverSession`) while it lives. When it
//! ends (shutdown, exit, SIGKILL, or a lease with no ping), `driver_gone`
//! drops the driver's holds and arena views, cancels its job's queued and
//! running tasks, kills its job's non-detached actors and asks for its
//! job's non-detached placement groups to be removed, as Ray does when a
//! job's driver exits. Detached actors and groups stay.

use super::{Action, ActorState, AgentState, TaskState};
use crate::errors::SystemErrorKind;
use crate::ids::{ActorId, ClientId, JobId, NodeId, ObjectId, PlacementGroupId, TaskId};
use oxray_proto::TaskKind;
use std::collections::{HashMap, HashSet, VecDeque};

/// How many ended drivers are remembered, so their late requests change nothing.
const ENDED_KEPT: usize = 1024;

/// Joined drivers with a live session, and the placement groups each job made here.
#[derive(Default)]
pub(super) struct DriverTable {
    live: HashMap<ClientId, JobId>,
    /// Non-detached placement groups created through this node, by job.
    groups: HashMap<JobId, HashSet<PlacementGroupId>>,
    /// Drivers and jobs whose session ended, newest last (bounded), and the
    /// same clients as a set for the reference path.
    ended: VecDeque<(ClientId, JobId)>,
    ended_clients: HashSet<ClientId>,
}

impl DriverTable {
    pub(super) fn has_ended(&self, client: &ClientId) -> bool {
        !self.ended_clients.is_empty() && self.ended_clients.contains(client)
    }

    fn remember_ended(&mut self, client: ClientId, job: JobId) {
        if self.ended.len() >= ENDED_KEPT
            && let Some((old, _)) = self.ended.pop_front()
        {
            self.ended_clients.remove(&old);
        }
        self.ended.push_back((client, job));
        self.ended_clients.insert(client);
    }

    fn job_ended(&self, job: &JobId) -> bool {
        self.ended.iter().any(|(_, j)| j == job) && !self.live.values().any(|j| j == job)
    }
}

impl AgentState {
    /// A driver opened its session. False if that client already has one (or had one).
    pub fn driver_connected(&mut self, client: ClientId, job: JobId) -> bool {
        if self.drivers.live.contains_key(&client) || self.drivers.has_ended(&client) {
            return false;
        }
        self.drivers.live.insert(client, job);
        true
    }

    /// Whether `client` was a driver whose session has ended (its late requests are dropped).
    pub fn driver_has_ended(&self, client: &ClientId) -> bool {
        self.drivers.has_ended(client)
    }

    /// A placement group was created for `job` through this node; it goes with the job's driver.
    pub fn note_placement_group(&mut self, job: JobId, pg_id: PlacementGroupId) {
        if self.drivers.job_ended(&job) {
            self.actions.push(Action::RemovePlacementGroup(pg_id));
            return;
        }
        self.drivers.groups.entry(job).or_default().insert(pg_id);
    }

    /// A placement group was removed: nothing to do for it when its driver goes.
    pub fn forget_placement_group(&mut self, pg_id: &PlacementGroupId) {
        self.drivers.groups.retain(|_, groups| {
            groups.remove(pg_id);
            !groups.is_empty()
        });
    }

    /// A joined driver's session ended. Cleans up after it once; later calls
    /// for the same client do nothing and return false.
    pub fn driver_gone(&mut self, client: ClientId, why: &str, now_ms: u64) -> bool {
        let Some(job) = self.drivers.live.remove(&client) else { return false };
        self.drivers.remember_ended(client, job);
        self.objects.release_all_views(client);
        let held: Vec<ObjectId> =
            self.objects.iter().filter(|(_, m)| m.holders.contains(&client)).map(|(id, _)| *id).collect();
        self.remove_holders(client, &held, now_ms);
        let job_still_live = self.drivers.live.values().any(|j| *j == job);
        let (tasks, actors) = if job_still_live { (0, 0) } else { self.end_job(job, now_ms) };
        if !job_still_live {
            // The job's work on other nodes (nested tasks, actors they made) goes too.
            let nodes: Vec<_> = self.peers.alive_nodes().collect();
            for node in nodes {
                self.actions.push(Action::PeerJobEnded { node, job });
            }
        }
        self.actions.push(Action::info(format!(
            "driver {} of job {job} is gone ({why}): released {} objects, cancelled {tasks} tasks, killed {actors} actors",
            client.short(),
            held.len()
        )));
        self.schedule(now_ms);
        true
    }

    /// Another node reports that the driver of `job` is gone: its work here stops too.
    pub fn job_ended_elsewhere(&mut self, job: JobId, from: NodeId, now_ms: u64) {
        let (tasks, actors) = self.end_job(job, now_ms);
        if tasks + actors > 0 {
            self.actions.push(Action::info(format!(
                "job {job} ended (its driver left node {}): cancelled {tasks} tasks, killed {actors} actors",
                from.short()
            )));
        }
        self.schedule(now_ms);
    }

    /// Cancels the job's tasks and kills its actors, detached ones (and what
    /// they run or submit) excepted. Returns how many tasks and actors.
    fn end_job(&mut self, job: JobId, now_ms: u64) -> (usize, usize) {
        for pg_id in self.drivers.groups.remove(&job).unwrap_or_default() {
            self.actions.push(Action::RemovePlacementGroup(pg_id));
        }
        let detached: HashSet<ActorId> = self.actors.values().filter(|a| a.creation.detached).map(|a| a.id).collect();
        let detached_workers: HashSet<ClientId> =
            self.actors.values().filter(|a| a.creation.detached).filter_map(|a| a.worker).map(ClientId::from).collect();
        let tasks: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.job == Some(job) && !t.cancelled && t.spec.kind != TaskKind::ActorCreation as i32)
            .filter(|(_, t)| {
                let on_detached = t.spec.kind == TaskKind::ActorTask as i32
                    && ActorId::from_bytes(&t.spec.actor_id).is_ok_and(|a| detached.contains(&a));
                let from_detached = ClientId::from_bytes(&t.spec.owner_id).is_ok_and(|c| detached_workers.contains(&c));
                !on_detached && !from_detached
            })
            .map(|(id, _)| *id)
            .collect();
        for task_id in &tasks {
            self.cancel_for_gone_driver(*task_id, now_ms);
        }
        let actors: Vec<ActorId> = self
            .actors
            .values()
            .filter(|a| !a.creation.detached && a.state != ActorState::Dead)
            .filter(|a| a.creation.job_id.as_slice() == job.as_bytes())
            .map(|a| a.id)
            .collect();
        for actor_id in &actors {
            let Some(class) = self.actors.get(actor_id).map(|a| a.class_name.clone()) else { continue };
            self.kill_actor_because(*actor_id, format!("The actor {class} died because its driver exited"), now_ms);
        }
        self.drop_ended_jobs_functions(Some(job));
        (tasks.len(), actors.len())
    }

    /// Stops one task of a gone driver: dropped if queued, its worker killed if running.
    fn cancel_for_gone_driver(&mut self, task_id: TaskId, now_ms: u64) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        task.cancelled = true;
        let first_return = task.spec.return_ids.first().and_then(|r| ObjectId::from_bytes(r).ok());
        match task.state {
            TaskState::Running(worker) => {
                // An actor call ends with its actor (killed above unless detached).
                if task.spec.kind == TaskKind::Normal as i32 {
                    self.signal_worker(worker, libc::SIGKILL);
                }
            }
            TaskState::Forwarded(node) => {
                if let Some(object_id) = first_return {
                    self.actions.push(Action::PeerCancel { node, object_id, force: true, recursive: false });
                }
            }
            TaskState::Ready | TaskState::WaitingArgs => {
                self.unqueue(task_id);
                self.finish_task(task_id, Some((SystemErrorKind::TaskCancelled, "Its driver exited".into())), now_ms);
            }
        }
    }
}
