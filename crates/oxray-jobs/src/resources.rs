//! What a job's entrypoint reserves in the cluster's scheduler while it runs
//! (`entrypoint_num_cpus/gpus/memory/resources`): the HTTP crate says what it
//! needs, the runtime (which owns the scheduler) provides it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why resources could not be held.
#[derive(Debug, Clone, PartialEq)]
pub enum HoldError {
    /// No node of the cluster will ever have them: the job fails
    /// (Ray's `JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE`), with this reason.
    Unschedulable(String),
    /// The scheduler refused or failed: the job fails with this reason.
    Failed(String),
}

/// Where a job's entrypoint resources are held, and so where it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldOn {
    /// The head's own node: the head runs the entrypoint.
    ThisNode,
    /// Another node (its id, hex): that node's agent runs it. `group` names
    /// the holding (hex), so a restarted head can take it over.
    Node { node: String, group: String },
}

/// Holds resources for a job's entrypoint in the cluster's scheduler, so no
/// task or actor can take them while its driver runs.
pub trait EntrypointResources: Send + Sync + std::fmt::Debug {
    /// Resolves once `resources` are held for job `id` on some node, which is
    /// where its driver then runs (a job waits PENDING meanwhile; dropping the
    /// future gives up).
    fn hold<'a>(
        &'a self,
        id: &'a str,
        resources: &'a BTreeMap<String, f64>,
    ) -> BoxFuture<'a, Result<HeldOn, HoldError>>;

    /// Takes over what a previous head held for job `id` on another node (that
    /// node's agent still holds it, as `group`), so it is given back at the end.
    fn adopt<'a>(
        &'a self,
        id: &'a str,
        resources: &'a BTreeMap<String, f64>,
        node: &'a str,
        group: &'a str,
    ) -> BoxFuture<'a, ()>;

    /// Gives back what job `id` holds (nothing held is fine).
    fn release<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ()>;
}
