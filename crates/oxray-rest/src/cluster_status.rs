//! Ray's `GET /api/cluster_status` (the legacy envelope) and its
//! `loadMetricsReport`: what an autoscaler needs to size a cluster. The head
//! writes it; the operator's autoscaler reads it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Resource amounts by name (`{"CPU": 2.0}`).
pub type Shape = BTreeMap<String, f64>;

/// The whole reply: `{"result", "msg", "data": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatusReply {
    pub result: bool,
    #[serde(default)]
    pub msg: String,
    pub data: ClusterStatusData,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatusData {
    /// `ray status`'s text, with `?format=1`.
    #[serde(default)]
    pub autoscaling_status: Option<String>,
    #[serde(default)]
    pub autoscaling_error: Option<Value>,
    pub cluster_status: ClusterStatus,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub load_metrics_report: LoadMetricsReport,
    /// Seconds since the epoch.
    #[serde(default)]
    pub time: f64,
}

/// The cluster's load: use, the work waiting for resources, and each live node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadMetricsReport {
    /// `[used, total]` of each resource over the live nodes.
    #[serde(default)]
    pub usage: BTreeMap<String, (f64, f64)>,
    /// `[shape, count]`: work waiting for resources on live nodes, summed by shape.
    #[serde(default)]
    pub resource_demand: Vec<(Shape, u64)>,
    /// Placement groups not yet placed.
    #[serde(default)]
    pub pg_demand: Vec<PlacementGroupDemand>,
    #[serde(default)]
    pub nodes: Vec<NodeLoad>,
}

/// A placement group waiting for room.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacementGroupDemand {
    /// `PACK`, `SPREAD`, `STRICT_PACK` or `STRICT_SPREAD`.
    pub strategy: String,
    pub bundles: Vec<Shape>,
}

/// One live node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLoad {
    /// Hex.
    #[serde(default)]
    pub node_id: String,
    pub node_ip: String,
    #[serde(default)]
    pub is_head: bool,
    pub resources_total: Shape,
    pub resources_available: Shape,
    /// How long nothing has been in use on it (0 while anything is).
    #[serde(default)]
    pub idle_duration_ms: u64,
    #[serde(default)]
    pub labels: HashMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ray_spells_the_report() {
        let report = LoadMetricsReport {
            usage: BTreeMap::from([("CPU".into(), (1.0, 4.0))]),
            resource_demand: vec![(Shape::from([("CPU".into(), 2.0)]), 3)],
            pg_demand: vec![PlacementGroupDemand { strategy: "PACK".into(), bundles: vec![Shape::new()] }],
            nodes: vec![NodeLoad { node_ip: "10.0.0.2".into(), idle_duration_ms: 5, ..NodeLoad::default() }],
        };
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["usage"]["CPU"], serde_json::json!([1.0, 4.0]));
        assert_eq!(value["resourceDemand"][0][1], 3);
        assert_eq!(value["pgDemand"][0]["strategy"], "PACK");
        assert_eq!(value["nodes"][0]["idleDurationMs"], 5);
        assert_eq!(serde_json::from_value::<LoadMetricsReport>(value).unwrap(), report);
    }
}
