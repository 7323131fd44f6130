//! What the Jobs API needs from the head: a submitted job's entrypoint
//! resources (`entrypoint_num_cpus`, ...), held by the head's scheduler as a
//! one-bundle placement group on whichever node fits them, where the job's
//! driver then runs (the job stays PENDING until the group is placed; tasks and
//! actors cannot take what it holds); the cluster's drivers, for DRIVER rows;
//! and running a job on another node through its agent (`NodeJobService`).

use super::{Head, NODE_TIMEOUT};
use crate::client::NodeJobClient;
use crate::ids::{NodeId, PlacementGroupId};
use oxray_jobs::{
    BoxFuture, DriverRow, DriverTable, EntrypointResources, HeldOn, HoldError, RemoteError, RemoteEvent, RemoteJobs,
    RemoteRun,
};
use oxray_proto::{
    Bundle, JobEvent, Package, PlacementGroupSpec, PlacementGroupState, PlacementStrategy, RunJobRequest,
    StopJobRequest, job_event,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

pub struct HeadEntrypointResources {
    head: Head,
    /// The head's own node (a job placed there runs in the head's process).
    node: NodeId,
    /// Job submission id -> the group holding its resources.
    held: Mutex<HashMap<String, PlacementGroupId>>,
    /// When the head started: nodes it knew before a restart get this long to
    /// come back before a job they alone could run is called unschedulable.
    started: std::time::Instant,
}

impl std::fmt::Debug for HeadEntrypointResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadEntrypointResources").field("node", &self.node.short()).finish_non_exhaustive()
    }
}

impl HeadEntrypointResources {
    pub fn new(head: Head, node: NodeId) -> Self {
        Self { head, node, held: Mutex::new(HashMap::new()), started: std::time::Instant::now() }
    }

    /// `Err` naming what is missing when no live node could ever fit
    /// `resources`; `Ok(false)` while no node has registered yet.
    fn feasible(&self, resources: &BTreeMap<String, f64>) -> Result<bool, HoldError> {
        let nodes: Vec<_> = self.head.nodes().into_iter().filter(|n| n.alive).collect();
        if nodes.is_empty() {
            return Ok(false);
        }
        let fits = |total: &HashMap<String, f64>| {
            resources.iter().all(|(name, amount)| total.get(name).copied().unwrap_or(0.0) >= *amount)
        };
        if nodes.iter().any(|n| fits(&n.total)) {
            return Ok(true);
        }
        let most = |name: &str| nodes.iter().map(|n| n.total.get(name).copied().unwrap_or(0.0)).fold(0.0, f64::max);
        let short: Vec<String> = resources
            .iter()
            .filter(|(name, amount)| most(name) < **amount)
            .map(|(name, amount)| format!("{name}={amount} (the most any node has is {})", most(name)))
            .collect();
        let short = if short.is_empty() { "all of them on one node".to_string() } else { short.join(", ") };
        Err(HoldError::Unschedulable(format!(
            "no node of the cluster ({} alive) can ever provide {short}; lower the entrypoint_* request, or add a \
             node that has them (oxray start --address ... --num-cpus/--num-gpus/--resources) and submit again",
            nodes.len()
        )))
    }
}

/// The one-bundle group that holds job `id`'s entrypoint resources.
fn job_group(id: &str, pg_id: PlacementGroupId, resources: &BTreeMap<String, f64>) -> PlacementGroupSpec {
    PlacementGroupSpec {
        pg_id: pg_id.to_vec(),
        bundles: vec![Bundle {
            resources: resources.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            ..Default::default()
        }],
        name: format!("job:{id}"),
        namespace: String::new(),
        strategy: PlacementStrategy::StrictPack as i32,
        job_id: Vec::new(),
        detached: true,
        pack_label: String::new(),
    }
}

impl EntrypointResources for HeadEntrypointResources {
    fn hold<'a>(
        &'a self,
        id: &'a str,
        resources: &'a BTreeMap<String, f64>,
    ) -> BoxFuture<'a, Result<HeldOn, HoldError>> {
        Box::pin(async move {
            let mut changes = self.head.changes();
            // Wait for a node to register (at start-up), then fail at once if none ever could fit,
            // once the nodes of a restarted head have had their time to come back.
            loop {
                match self.feasible(resources) {
                    Ok(true) => break,
                    Err(e)
                        if self.started.elapsed() >= NODE_TIMEOUT * 2 || self.head.nodes().iter().all(|n| n.alive) =>
                    {
                        return Err(e);
                    }
                    Ok(false) | Err(_) => {}
                }
                let grace_left = (NODE_TIMEOUT * 2).saturating_sub(self.started.elapsed());
                let changed = async {
                    changes.changed().await.map_err(|_| HoldError::Failed("the head is shutting down".into()))
                };
                if grace_left.is_zero() {
                    changed.await?;
                } else if let Ok(changed) = tokio::time::timeout(grace_left, changed).await {
                    changed?;
                }
            }
            let pg_id = PlacementGroupId::random();
            let spec = job_group(id, pg_id, resources);
            self.held.lock().insert(id.to_string(), pg_id);
            self.head.create_group(spec).await.map_err(|e| HoldError::Failed(e.message().into()))?;
            loop {
                match self.head.group_state(pg_id) {
                    Some(PlacementGroupState::Created) => {
                        return Ok(match self.head.group_nodes(pg_id).first() {
                            Some(node) if *node != self.node.to_vec() => {
                                HeldOn::Node { node: hex::encode(node), group: pg_id.hex() }
                            }
                            _ => HeldOn::ThisNode,
                        });
                    }
                    Some(PlacementGroupState::Pending) => {}
                    _ => return Err(HoldError::Failed("its placement group was removed".into())),
                }
                changes.changed().await.map_err(|_| HoldError::Failed("the head is shutting down".into()))?;
            }
        })
    }

    fn adopt<'a>(
        &'a self,
        id: &'a str,
        resources: &'a BTreeMap<String, f64>,
        node: &'a str,
        group: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let pg_id = hex::decode(group).ok().and_then(|b| PlacementGroupId::from_bytes(&b).ok());
            let (Some(pg_id), Ok(node)) = (pg_id, hex::decode(node)) else {
                tracing::warn!("job {id}: cannot take over its resources: bad group {group:?} or node {node:?}");
                return;
            };
            let spec = job_group(id, pg_id, resources);
            self.head.adopt_group(spec, node);
            self.held.lock().insert(id.to_string(), pg_id);
        })
    }

    fn release<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let group = self.held.lock().remove(id);
            if let Some(pg_id) = group {
                self.head.remove_group(pg_id).await;
            }
        })
    }
}

/// The head's driver table as the Jobs API lists it.
pub struct HeadDrivers(pub Head);

impl std::fmt::Debug for HeadDrivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeadDrivers")
    }
}

impl DriverTable for HeadDrivers {
    fn drivers(&self) -> Vec<DriverRow> {
        self.0
            .drivers()
            .into_iter()
            .map(|d| DriverRow {
                job_id: hex::encode(&d.job_id),
                node_id: hex::encode(&d.node_id),
                node_ip: d.node_ip,
                pid: d.pid,
                entrypoint: d.entrypoint,
                submission_id: Some(d.submission_id).filter(|s| !s.is_empty()),
                start_time: d.start_time_ms,
                end_time: Some(d.end_time_ms).filter(|t| *t != 0),
            })
            .collect()
    }
}

/// Runs jobs on other nodes through their agents' `NodeJobService`.
pub struct HeadRemoteJobs {
    head: Head,
    /// The head's address, which a job's bare `init()` joins.
    head_address: String,
}

impl std::fmt::Debug for HeadRemoteJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadRemoteJobs").field("head_address", &self.head_address).finish_non_exhaustive()
    }
}

impl HeadRemoteJobs {
    pub fn new(head: Head, head_address: String) -> Self {
        Self { head, head_address }
    }

    async fn client(&self, node_id: &str) -> Result<NodeJobClient, RemoteError> {
        let node = hex::decode(node_id).map_err(|_| RemoteError::BadNodeId { node_id: node_id.to_string() })?;
        self.head.node_jobs(&node).await.map_err(|reason| RemoteError::Unreachable { reason })
    }
}

/// An agent's refusal, as its status' message (what the job's record quotes).
fn call_error(status: tonic::Status) -> RemoteError {
    RemoteError::Call { message: status.message().to_string() }
}

impl RemoteJobs for HeadRemoteJobs {
    fn run<'a>(
        &'a self,
        node_id: &'a str,
        run: RemoteRun,
    ) -> BoxFuture<'a, Result<tokio::sync::mpsc::Receiver<RemoteEvent>, RemoteError>> {
        Box::pin(async move {
            let mut client = self.client(node_id).await?;
            let request = RunJobRequest {
                submission_id: run.submission_id,
                run_id: run.run_id,
                entrypoint: run.entrypoint,
                runtime_env_json: run.runtime_env_json,
                metadata_json: run.metadata_json,
                packages: run.packages.into_iter().map(|(uri, data)| Package { uri, data }).collect(),
                attach: run.attach_from.is_some(),
                offset: run.attach_from.unwrap_or(0),
                head_address: self.head_address.clone(),
            };
            let mut stream = client.run_job(request).await.map_err(call_error)?.into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            tokio::spawn(async move {
                // Ends (closing `tx`) when the node ends the stream or is lost.
                while let Ok(Some(JobEvent { event: Some(event) })) = stream.message().await {
                    let event = match event {
                        job_event::Event::StartedPid(pid) => RemoteEvent::Started { pid },
                        job_event::Event::Output(bytes) => RemoteEvent::Output(bytes),
                        job_event::Event::SetupFailed(e) => RemoteEvent::SetupFailed(e),
                        job_event::Event::StartFailed(e) => RemoteEvent::StartFailed(e),
                        job_event::Event::ExitCode(code) => RemoteEvent::Exited(Some(code)),
                        job_event::Event::ExitedUnknown(_) => RemoteEvent::Exited(None),
                    };
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
            });
            Ok(rx)
        })
    }

    fn stop<'a>(&'a self, node_id: &'a str, run_id: &'a str) -> BoxFuture<'a, Result<bool, RemoteError>> {
        Box::pin(async move {
            let mut client = self.client(node_id).await?;
            let reply = client.stop_job(StopJobRequest { run_id: run_id.to_string() }).await.map_err(call_error)?;
            Ok(reply.into_inner().stopped)
        })
    }

    fn node_alive<'a>(&'a self, node_id: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let Ok(id) = hex::decode(node_id) else { return false };
            self.head.nodes().iter().any(|node| node.node_id == id && node.alive)
        })
    }
}
