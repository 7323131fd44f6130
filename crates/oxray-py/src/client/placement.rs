//! Placement groups: creating, removing, and looking them up (by id or name,
//! or all of them) as `PlacementGroupInfo` records; telling a group's resource
//! names (`CPU_group_<pg>`) from a node's own.

use super::Client;
use crate::error::client_error as rpc_err;
use crate::records::PlacementGroupInfo;
use crate::runtime;
use oxray_runtime::head::placement::Strategy;
use oxray_runtime::proto::{Bundle, Empty, PlacementGroupRequest, PlacementGroupSpec};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;

/// Whether `name` is one of the resource names a placement group's bundles add to
/// their nodes (`CPU_group_<pg>`, `bundle_group_0_<pg>`), which views of a node's own
/// resources leave out.
#[pyfunction]
pub(crate) fn is_placement_group_resource(name: &str) -> bool {
    oxray_runtime::resources::group_names::is_group_name(name)
}

#[pymethods]
impl Client {
    /// `job_id`: the job whose driver's exit removes the group, unless `detached`;
    /// `bundle_label_selector`: one selector per bundle, or none; `pack_label`: a label
    /// whose one value all the bundles' nodes share (Ray's `topology_strategy`), or "".
    #[pyo3(signature = (pg_id, bundles, strategy, name="".to_string(), namespace="".to_string(), job_id=Vec::new(),
        detached=false, bundle_label_selector=Vec::new(), pack_label=String::new()))]
    #[allow(clippy::too_many_arguments, reason = "mirrors placement_group()'s keyword arguments")]
    fn create_placement_group(
        &self,
        py: Python<'_>,
        pg_id: Vec<u8>,
        bundles: Vec<HashMap<String, f64>>,
        strategy: String,
        name: String,
        namespace: String,
        job_id: Vec<u8>,
        detached: bool,
        bundle_label_selector: Vec<HashMap<String, String>>,
        pack_label: String,
    ) -> PyResult<PlacementGroupInfo> {
        let strategy = Strategy::parse(&strategy).map_err(|e| PyValueError::new_err(e.to_string()))?;
        if !bundle_label_selector.is_empty() && bundle_label_selector.len() != bundles.len() {
            return Err(PyValueError::new_err(format!(
                "bundle_label_selector has {} entries for {} bundles: give one per bundle",
                bundle_label_selector.len(),
                bundles.len()
            )));
        }
        let mut selectors = bundle_label_selector.into_iter();
        let spec = PlacementGroupSpec {
            pg_id,
            bundles: bundles
                .into_iter()
                .map(|resources| Bundle { resources, label_selector: selectors.next().unwrap_or_default() })
                .collect(),
            strategy: strategy.to_proto() as i32,
            name,
            namespace,
            job_id,
            detached,
            pack_label,
        };
        let mut agent = self.inner.driver();
        let reply =
            py.detach(|| runtime().block_on(agent.create_placement_group(spec))).map_err(|s| rpc_err(s.into()))?;
        Ok(reply.into_inner().into())
    }

    fn remove_placement_group(&self, py: Python<'_>, pg_id: Vec<u8>) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let request = PlacementGroupRequest { pg_id, ..Default::default() };
        py.detach(|| runtime().block_on(agent.remove_placement_group(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// The group with this id, or else with this name in this namespace; None if there is none.
    #[pyo3(signature = (pg_id=Vec::new(), name="".to_string(), namespace="".to_string()))]
    fn get_placement_group(
        &self,
        py: Python<'_>,
        pg_id: Vec<u8>,
        name: String,
        namespace: String,
    ) -> PyResult<Option<PlacementGroupInfo>> {
        let mut agent = self.inner.driver();
        let request = PlacementGroupRequest { pg_id, name, namespace };
        let reply =
            py.detach(|| runtime().block_on(agent.get_placement_group(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(reply.into_inner().info.map(PlacementGroupInfo::from))
    }

    fn list_placement_groups(&self, py: Python<'_>) -> PyResult<Vec<PlacementGroupInfo>> {
        let mut agent = self.inner.driver();
        let reply =
            py.detach(|| runtime().block_on(agent.list_placement_groups(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        Ok(reply.into_inner().groups.into_iter().map(PlacementGroupInfo::from).collect())
    }
}
