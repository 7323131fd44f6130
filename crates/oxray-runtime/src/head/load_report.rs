//! What an autoscaler reads of the cluster (Ray's `/api/cluster_status`
//! `loadMetricsReport`), from the node, actor and group tables.

use super::Head;
use super::placement::Strategy;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

impl Head {
    /// What an autoscaler needs (Ray's `/api/cluster_status` `loadMetricsReport`):
    /// the work waiting for resources on live nodes, summed by shape
    /// (`resourceDemand`), the placement groups not yet placed (`pgDemand`), the
    /// cluster's use (`usage`) and each live node's resources and idle time (`nodes`).
    pub fn load_metrics_report(&self) -> Value {
        // Read before the node table's lock (never both at once). A node hosting a live actor is busy even when the actor holds no resources (0-CPU actors).
        let hosting = self.actors.lock().hosting_nodes();
        let nodes = self.nodes.lock();
        let live = nodes.live_loads();
        let mut demand: Vec<(BTreeMap<String, f64>, u64)> = Vec::new();
        for node in &live {
            for d in node.demand {
                let shape: BTreeMap<String, f64> = d.shape.clone().into_iter().collect();
                match demand.iter_mut().find(|(s, _)| *s == shape) {
                    Some((_, n)) => *n += u64::from(d.count),
                    None => demand.push((shape, u64::from(d.count))),
                }
            }
        }
        let mut usage: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        let mut node_rows = Vec::new();
        for node in &live {
            let info = node.info;
            for (name, total) in &info.total {
                let available = info.available.get(name).copied().unwrap_or(0.0);
                let entry = usage.entry(name.clone()).or_default();
                entry.0 += total - available;
                entry.1 += total;
            }
            let sorted = |m: &HashMap<String, f64>| m.iter().map(|(k, v)| (k.clone(), *v)).collect::<BTreeMap<_, _>>();
            node_rows.push(json!({
                "nodeId": hex::encode(&info.node_id),
                "nodeIp": info.ip,
                "isHead": info.is_head,
                "resourcesTotal": sorted(&info.total),
                "resourcesAvailable": sorted(&info.available),
                "idleDurationMs": if hosting.contains(&info.node_id) {
                    0
                } else {
                    node.idle_since.map_or(0, |s| s.elapsed().as_millis() as u64)
                },
                "labels": info.labels,
            }));
        }
        drop(live);
        drop(nodes);
        let pg_demand: Vec<Value> = self
            .groups
            .lock()
            .pending_specs()
            .iter()
            .map(|spec| {
                let bundles: Vec<BTreeMap<String, f64>> =
                    spec.bundles.iter().map(|b| b.resources.clone().into_iter().collect()).collect();
                let strategy = Strategy::from_proto(spec.strategy()).map_or("PACK", Strategy::as_str);
                json!({"strategy": strategy, "bundles": bundles})
            })
            .collect();
        json!({
            "usage": usage.into_iter().map(|(k, (used, total))| (k, json!([used, total]))).collect::<serde_json::Map<_, _>>(),
            "resourceDemand": demand.into_iter().map(|(shape, n)| json!([shape, n])).collect::<Vec<_>>(),
            "pgDemand": pg_demand,
            "nodes": node_rows,
        })
    }
}
