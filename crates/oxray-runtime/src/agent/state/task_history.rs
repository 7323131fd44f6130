//! What this node tells the State API about its tasks: each live task's
//! status, and a bounded history of the ones that ended here (the last
//! `OXRAY_TASK_HISTORY`, 10,000 by default), kept as the ended `TaskEntry`'s
//! own fields moved out, so recording costs no copy of the spec.

use super::AgentState;
use super::tasks::{TaskEntry, TaskState};
use crate::errors::SystemErrorKind;
use crate::ids::{TaskId, WorkerId};
use oxray_proto::{TaskKind, TaskRecord, TaskStatus};
use std::collections::VecDeque;

const DEFAULT_TASK_HISTORY: usize = 10_000;

/// `OXRAY_TASK_HISTORY`, else 10,000 ended tasks per node.
pub(crate) fn task_history_limit() -> usize {
    std::env::var("OXRAY_TASK_HISTORY").ok().and_then(|raw| raw.trim().parse().ok()).unwrap_or(DEFAULT_TASK_HISTORY)
}

/// How a task ended.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    Finished,
    /// The task's code raised.
    Raised,
    /// The runtime failed it.
    Failed(SystemErrorKind, String),
}

/// A task that ended on this node.
#[derive(Debug)]
pub(super) struct EndedTask {
    task_id: TaskId,
    entry: TaskEntry,
    worker: Option<(WorkerId, u32)>,
    outcome: Outcome,
    end_ms: u64,
}

/// The last ended tasks, oldest first, and how many ended since the node started.
#[derive(Debug)]
pub(super) struct TaskHistory {
    ended: VecDeque<EndedTask>,
    limit: usize,
    finished: u64,
    failed: u64,
}

impl Default for TaskHistory {
    fn default() -> Self {
        Self { ended: VecDeque::new(), limit: task_history_limit(), finished: 0, failed: 0 }
    }
}

/// This node's tasks by state, for its `NodeStats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskCounts {
    pub running: u32,
    pub pending: u32,
    /// Since the node started.
    pub finished: u64,
    pub failed: u64,
}

impl TaskHistory {
    pub(super) fn push(
        &mut self,
        task_id: TaskId,
        entry: TaskEntry,
        worker: Option<(WorkerId, u32)>,
        outcome: Outcome,
        now_ms: u64,
    ) {
        match outcome {
            Outcome::Finished => self.finished += 1,
            Outcome::Raised | Outcome::Failed(..) => self.failed += 1,
        }
        if self.limit == 0 {
            return;
        }
        while self.ended.len() >= self.limit {
            self.ended.pop_front();
        }
        self.ended.push_back(EndedTask { task_id, entry, worker, outcome, end_ms: now_ms });
    }

    pub(super) fn len(&self) -> usize {
        self.ended.len()
    }
}

/// Ray's `ErrorType` name for a failure the runtime made.
fn error_type(kind: SystemErrorKind) -> &'static str {
    match kind {
        SystemErrorKind::WorkerCrashed => "WORKER_DIED",
        SystemErrorKind::ActorDied => "ACTOR_DIED",
        SystemErrorKind::ActorUnavailable => "ACTOR_UNAVAILABLE",
        SystemErrorKind::ActorUnschedulable => "ACTOR_UNSCHEDULABLE_ERROR",
        SystemErrorKind::TaskUnschedulable => "TASK_UNSCHEDULABLE_ERROR",
        SystemErrorKind::TaskCancelled => "TASK_CANCELLED",
        SystemErrorKind::ObjectLost => "OBJECT_LOST",
        SystemErrorKind::OwnerDied => "OWNER_DIED",
        SystemErrorKind::System => "RAY_SYSTEM_ERROR",
    }
}

fn record(task_id: &TaskId, entry: &TaskEntry, status: TaskStatus, worker: Option<(WorkerId, u32)>) -> TaskRecord {
    let spec = &entry.spec;
    let name =
        if spec.kind == TaskKind::ActorCreation as i32 { format!("{}.__init__", spec.name) } else { spec.name.clone() };
    TaskRecord {
        task_id: task_id.to_vec(),
        attempt: entry.attempt,
        name,
        kind: spec.kind,
        status: status as i32,
        job_id: spec.job_id.clone(),
        actor_id: spec.actor_id.clone(),
        worker_id: worker.map(|(w, _)| w.to_vec()).unwrap_or_default(),
        worker_pid: worker.map(|(_, pid)| pid).unwrap_or(0),
        resources: spec.resources.clone(),
        placement_group_id: crate::agent::placement_group_of(spec),
        creation_time_ms: entry.created_ms,
        start_time_ms: entry.started_ms,
        parent_task_id: spec.parent_task_id.clone(),
        ..Default::default()
    }
}

impl AgentState {
    pub fn task_counts(&self) -> TaskCounts {
        let (mut running, mut pending) = (0, 0);
        for task in self.tasks.values() {
            match task.state {
                TaskState::Running(_) => running += 1,
                TaskState::WaitingArgs | TaskState::Ready => pending += 1,
                TaskState::Forwarded(_) => {}
            }
        }
        TaskCounts { running, pending, finished: self.task_history.finished, failed: self.task_history.failed }
    }

    /// The worker running a task, with its pid.
    pub(super) fn task_worker(&self, entry: &TaskEntry) -> Option<(WorkerId, u32)> {
        match entry.state {
            TaskState::Running(worker) => Some((worker, self.workers.get(&worker).map(|w| w.pid).unwrap_or(0))),
            _ => None,
        }
    }

    /// Up to `limit` of this node's tasks, live ones first, then the most
    /// recently ended; and how many it has in all. A task this node handed to
    /// another is that node's to report.
    pub fn list_tasks(&self, limit: usize) -> (Vec<TaskRecord>, usize) {
        let here = |t: &TaskEntry| !matches!(t.state, TaskState::Forwarded(_));
        let total = self.tasks.values().filter(|t| here(t)).count() + self.task_history.len();
        let live = self.tasks.iter().filter(|(_, t)| here(t));
        let mut out = Vec::new();
        for (id, entry) in live.take(limit) {
            let status = match entry.state {
                TaskState::WaitingArgs => TaskStatus::PendingArgsAvail,
                TaskState::Ready => TaskStatus::PendingNodeAssignment,
                TaskState::Running(_) | TaskState::Forwarded(_) => TaskStatus::Running,
            };
            out.push(record(id, entry, status, self.task_worker(entry)));
        }
        for ended in self.task_history.ended.iter().rev().take(limit.saturating_sub(out.len())) {
            let status =
                if matches!(ended.outcome, Outcome::Finished) { TaskStatus::Finished } else { TaskStatus::Failed };
            let mut row = record(&ended.task_id, &ended.entry, status, ended.worker);
            row.end_time_ms = ended.end_ms;
            match &ended.outcome {
                Outcome::Finished => {}
                Outcome::Raised => row.error_type = "TASK_EXECUTION_EXCEPTION".into(),
                Outcome::Failed(kind, message) => {
                    row.error_type = error_type(*kind).into();
                    row.error_message.clone_from(message);
                }
            }
            out.push(row);
        }
        (out, total)
    }
}
