//! What an autoscaler reads of the cluster (Ray's `/api/cluster_status`
//! `loadMetricsReport`), from the node, actor and group tables.

use super::Head;
use super::placement::Strategy;
use oxray_rest::{LoadMetricsReport, NodeLoad, PlacementGroupDemand};
use std::collections::BTreeMap;

impl Head {
    /// What an autoscaler needs (Ray's `/api/cluster_status` `loadMetricsReport`):
    /// the work waiting for resources on live nodes, summed by shape
    /// (`resourceDemand`), the placement groups not yet placed (`pgDemand`), the
    /// cluster's use (`usage`) and each live node's resources and idle time (`nodes`).
    pub fn load_metrics_report(&self) -> LoadMetricsReport {
        // Read before the node table's lock (never both at once). A node hosting a live actor is busy even when the actor holds no resources (0-CPU actors).
        let hosting = self.actors.lock().hosting_nodes();
        let nodes = self.nodes.lock();
        let live = nodes.live_loads();
        let mut report = LoadMetricsReport::default();
        for node in &live {
            for d in node.demand {
                let shape: BTreeMap<String, f64> = d.shape.clone().into_iter().collect();
                match report.resource_demand.iter_mut().find(|(s, _)| *s == shape) {
                    Some((_, n)) => *n += u64::from(d.count),
                    None => report.resource_demand.push((shape, u64::from(d.count))),
                }
            }
        }
        for node in &live {
            let info = node.info;
            for (name, total) in &info.total {
                let available = info.available.get(name).copied().unwrap_or(0.0);
                let entry = report.usage.entry(name.clone()).or_default();
                entry.0 += total - available;
                entry.1 += total;
            }
            report.nodes.push(NodeLoad {
                node_id: hex::encode(&info.node_id),
                node_ip: info.ip.clone(),
                is_head: info.is_head,
                resources_total: info.total.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                resources_available: info.available.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                idle_duration_ms: if hosting.contains(&info.node_id) {
                    0
                } else {
                    node.idle_since.map_or(0, |s| s.elapsed().as_millis() as u64)
                },
                labels: info.labels.clone(),
            });
        }
        drop(live);
        drop(nodes);
        report.pg_demand = self
            .groups
            .lock()
            .pending_specs()
            .iter()
            .map(|spec| PlacementGroupDemand {
                strategy: Strategy::from_proto(spec.strategy()).map_or("PACK", Strategy::as_str).to_string(),
                bundles: spec.bundles.iter().map(|b| b.resources.clone().into_iter().collect()).collect(),
            })
            .collect();
        report
    }
}
