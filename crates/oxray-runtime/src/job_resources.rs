//! What the Jobs API needs from the head: a submitted job's entrypoint
//! resources (`entrypoint_num_cpus`, ...), held by the head's scheduler as a
//! one-bundle placement group pinned to the head's node, where oxray runs job
//! drivers (the job stays PENDING until the group is placed; tasks and actors
//! cannot take what it holds); and the cluster's drivers, for DRIVER rows.

use crate::head::Head;
use crate::ids::{NodeId, PlacementGroupId};
use oxray_http::{BoxFuture, DriverRow, DriverTable, EntrypointResources, HoldError};
use oxray_proto::{Bundle, PlacementGroupSpec, PlacementGroupState, PlacementStrategy};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

pub struct HeadEntrypointResources {
    head: Head,
    /// The node job drivers run on.
    node: NodeId,
    /// Job submission id -> the group holding its resources.
    held: Mutex<HashMap<String, PlacementGroupId>>,
}

impl std::fmt::Debug for HeadEntrypointResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadEntrypointResources").field("node", &self.node.short()).finish_non_exhaustive()
    }
}

impl HeadEntrypointResources {
    pub fn new(head: Head, node: NodeId) -> Self {
        Self { head, node, held: Mutex::new(HashMap::new()) }
    }

    /// `Err` naming what the driver's node lacks when it could never fit
    /// `resources`; `Ok(false)` while that node has not registered yet.
    fn feasible(&self, resources: &BTreeMap<String, f64>) -> Result<bool, HoldError> {
        let Some(node) = self.head.nodes().into_iter().find(|n| n.node_id == self.node.to_vec()) else {
            return Ok(false);
        };
        let short: Vec<String> = resources
            .iter()
            .filter(|(name, amount)| node.total.get(*name).copied().unwrap_or(0.0) < **amount)
            .map(|(name, amount)| format!("{name}={amount} (it has {})", node.total.get(name).copied().unwrap_or(0.0)))
            .collect();
        if short.is_empty() {
            return Ok(true);
        }
        Err(HoldError::Unschedulable(format!(
            "oxray runs job drivers on the head node ({}), which can never provide {}; lower the \
             entrypoint_* request or start the head with more (oxray start --head --num-cpus/--num-gpus/--resources)",
            self.node.short(),
            short.join(", ")
        )))
    }
}

impl EntrypointResources for HeadEntrypointResources {
    fn hold<'a>(&'a self, id: &'a str, resources: &'a BTreeMap<String, f64>) -> BoxFuture<'a, Result<(), HoldError>> {
        Box::pin(async move {
            let mut changes = self.head.changes();
            // Wait for the head node to register (at start-up), then fail at once if it never could fit.
            while !self.feasible(resources)? {
                changes.changed().await.map_err(|_| HoldError::Failed("the head is shutting down".into()))?;
            }
            let pg_id = PlacementGroupId::random();
            let spec = PlacementGroupSpec {
                pg_id: pg_id.to_vec(),
                bundles: vec![Bundle { resources: resources.iter().map(|(k, v)| (k.clone(), *v)).collect() }],
                name: format!("job:{id}"),
                namespace: String::new(),
                strategy: PlacementStrategy::StrictPack as i32,
                job_id: Vec::new(),
                detached: true,
            };
            self.held.lock().insert(id.to_string(), pg_id);
            self.head.create_group_on_node(spec, self.node).await.map_err(|e| HoldError::Failed(e.message().into()))?;
            loop {
                match self.head.group_state(pg_id) {
                    Some(PlacementGroupState::Created) => return Ok(()),
                    Some(PlacementGroupState::Pending) => {}
                    _ => return Err(HoldError::Failed("its placement group was removed".into())),
                }
                changes.changed().await.map_err(|_| HoldError::Failed("the head is shutting down".into()))?;
            }
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl DriverTable for HeadDrivers {
    fn drivers(&self) -> Vec<DriverRow> {
        self.0
            .drivers()
            .into_iter()
            .map(|d| DriverRow {
                job_id: hex(&d.job_id),
                node_id: hex(&d.node_id),
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
