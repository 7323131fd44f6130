//! Placement groups: creating, removing, and looking them up (by id or name,
//! or all of them) as dicts.

use super::Client;
use crate::error::client_error as rpc_err;
use crate::runtime;
use oxray_runtime::placement::Strategy;
use oxray_runtime::proto::{Bundle, Empty, PlacementGroupInfo, PlacementGroupRequest, PlacementGroupSpec};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;

#[pymethods]
impl Client {
    #[pyo3(signature = (pg_id, bundles, strategy, name="".to_string(), namespace="".to_string()))]
    fn create_placement_group<'py>(
        &self,
        py: Python<'py>,
        pg_id: Vec<u8>,
        bundles: Vec<HashMap<String, f64>>,
        strategy: String,
        name: String,
        namespace: String,
    ) -> PyResult<Bound<'py, PyDict>> {
        let strategy = Strategy::parse(&strategy).map_err(PyValueError::new_err)?;
        let spec = PlacementGroupSpec {
            pg_id,
            bundles: bundles.into_iter().map(|resources| Bundle { resources }).collect(),
            strategy: strategy.to_proto() as i32,
            name,
            namespace,
        };
        let mut agent = self.inner.driver();
        let reply =
            py.detach(|| runtime().block_on(agent.create_placement_group(spec))).map_err(|s| rpc_err(s.into()))?;
        placement_group_dict(py, &reply.into_inner())
    }

    fn remove_placement_group(&self, py: Python<'_>, pg_id: Vec<u8>) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let request = PlacementGroupRequest { pg_id, ..Default::default() };
        py.detach(|| runtime().block_on(agent.remove_placement_group(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// The group with this id, or else with this name in this namespace; None if there is none.
    #[pyo3(signature = (pg_id=Vec::new(), name="".to_string(), namespace="".to_string()))]
    fn get_placement_group<'py>(
        &self,
        py: Python<'py>,
        pg_id: Vec<u8>,
        name: String,
        namespace: String,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut agent = self.inner.driver();
        let request = PlacementGroupRequest { pg_id, name, namespace };
        let reply =
            py.detach(|| runtime().block_on(agent.get_placement_group(request))).map_err(|s| rpc_err(s.into()))?;
        reply.into_inner().info.map(|info| placement_group_dict(py, &info)).transpose()
    }

    fn list_placement_groups<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut agent = self.inner.driver();
        let reply =
            py.detach(|| runtime().block_on(agent.list_placement_groups(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        reply.into_inner().groups.iter().map(|g| placement_group_dict(py, g)).collect()
    }
}

/// Ray's name of a placement group state.
fn placement_group_state_name(state: oxray_runtime::proto::PlacementGroupState) -> &'static str {
    use oxray_runtime::proto::PlacementGroupState as S;
    match state {
        S::Pending | S::Unspecified => "PENDING",
        S::Created => "CREATED",
        S::Removed => "REMOVED",
    }
}

fn placement_group_dict<'py>(py: Python<'py>, info: &PlacementGroupInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let spec = info.spec.clone().unwrap_or_default();
    let strategy = Strategy::from_proto(spec.strategy()).map(Strategy::as_str).unwrap_or("");
    d.set_item("placement_group_id", hex::encode(&spec.pg_id))?;
    d.set_item("name", spec.name)?;
    d.set_item("namespace", spec.namespace)?;
    d.set_item("strategy", strategy)?;
    d.set_item("state", placement_group_state_name(info.state()))?;
    let bundles: Vec<HashMap<String, f64>> = spec.bundles.into_iter().map(|b| b.resources).collect();
    d.set_item("bundles", bundles)?;
    let nodes: Vec<String> = info.bundle_nodes.iter().map(hex::encode).collect();
    d.set_item("bundle_nodes", nodes)?;
    Ok(d)
}
