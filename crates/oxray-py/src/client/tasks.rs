//! Tasks: submitting a task, an actor creation or an actor call, the function
//! table (register and fetch pickled functions), and cancelling a task.

use super::{Client, to_ids};
use crate::error::client_error as rpc_err;
use crate::records::{CreatedActor, TaskKind};
use crate::runtime;
use oxray_runtime::labels::LabelSelector;
use oxray_runtime::proto::{self, CancelRequest, FunctionBlob, FunctionId, TaskArg, TaskSpec, task_arg};
use oxray_runtime::resources::ResourceSet;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::HashMap;

/// A task argument from Python: (is_ref, bytes) — an object id or an encoded value.
type PyArg = (bool, Vec<u8>);

#[pymethods]
impl Client {
    /// Submits a task, an actor creation or an actor call. A task or an actor
    /// call returns None at once (a request that can never be scheduled fails
    /// in its returns); an actor creation waits for the actor to be registered
    /// and returns it as a `CreatedActor`.
    #[pyo3(signature = (*, kind, task_id, function_id, name, args, kwarg_names, return_ids, resources,
        max_retries=0, retry_exceptions=false, actor_id=None, method_name=String::new(),
        env_vars=HashMap::new(), nested_refs=Vec::new(), job_id=Vec::new(), max_restarts=0, max_task_retries=0,
        max_concurrency=1, actor_name=String::new(), namespace=String::new(), detached=false,
        placement_resources=HashMap::new(), get_if_exists=false, job_namespace=String::new(), parent_task_id=Vec::new(),
        capture_child_tasks=false, max_calls=0, call_max_task_retries=None, retry_exception_types=Vec::new(),
        node_affinity=None, spread=false, label_selector=HashMap::new(), fallback_strategy=Vec::new(),
        concurrency_group=String::new(), concurrency_groups=HashMap::new(), placement_group=None))]
    #[allow(clippy::too_many_arguments, reason = "one argument per TaskSpec field, passed by keyword from Python")]
    fn submit(
        &self,
        py: Python<'_>,
        kind: TaskKind,
        task_id: Vec<u8>,
        function_id: Vec<u8>,
        name: String,
        args: Vec<PyArg>,
        kwarg_names: Vec<String>,
        return_ids: Vec<Vec<u8>>,
        resources: HashMap<String, f64>,
        max_retries: i32,
        retry_exceptions: bool,
        actor_id: Option<Vec<u8>>,
        method_name: String,
        env_vars: HashMap<String, String>,
        nested_refs: Vec<Vec<u8>>,
        job_id: Vec<u8>,
        max_restarts: i32,
        max_task_retries: i32,
        max_concurrency: i32,
        actor_name: String,
        namespace: String,
        detached: bool,
        placement_resources: HashMap<String, f64>,
        get_if_exists: bool,
        job_namespace: String,
        parent_task_id: Vec<u8>,
        capture_child_tasks: bool,
        max_calls: i32,
        call_max_task_retries: Option<i32>,
        retry_exception_types: Vec<u8>,
        node_affinity: Option<(Vec<u8>, bool)>,
        spread: bool,
        label_selector: HashMap<String, String>,
        fallback_strategy: Vec<HashMap<String, String>>,
        concurrency_group: String,
        concurrency_groups: HashMap<String, i32>,
        placement_group: Option<(Vec<u8>, i32)>,
    ) -> PyResult<Option<CreatedActor>> {
        // Refused here, at the call: a batched submission's error would reach no caller.
        for quantities in [&resources, &placement_resources] {
            ResourceSet::check_map(quantities).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        for selector in std::iter::once(&label_selector).chain(&fallback_strategy) {
            LabelSelector::parse(selector).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        let args = args
            .into_iter()
            .map(|(is_ref, data)| TaskArg {
                kind: Some(if is_ref { task_arg::Kind::ObjectId(data) } else { task_arg::Kind::Value(data) }),
            })
            .collect();
        let spec = TaskSpec {
            task_id,
            function_id,
            name,
            kind: proto::TaskKind::from(kind) as i32,
            args,
            kwarg_names,
            return_ids,
            resources,
            max_retries,
            retry_exceptions,
            actor_id: actor_id.unwrap_or_default(),
            method_name,
            env_vars,
            nested_refs,
            job_id,
            max_restarts,
            max_task_retries,
            max_concurrency,
            actor_name,
            namespace,
            detached,
            placement_resources,
            owner_id: self.inner.client_id.to_vec(),
            job_namespace,
            parent_task_id,
            capture_child_tasks,
            max_calls,
            call_max_task_retries,
            retry_exception_types,
            node_affinity: node_affinity.map(|(node_id, soft)| proto::NodeAffinity { node_id, soft }),
            spread,
            label_selector,
            fallback_strategy: fallback_strategy
                .into_iter()
                .map(|label_selector| proto::LabelFallback { label_selector })
                .collect(),
            concurrency_group,
            concurrency_groups,
            placement_group: placement_group.map(|(placement_group_id, bundle_index)| proto::PlacementGroupBundle {
                placement_group_id,
                bundle_index,
            }),
        };
        let return_ids_copy = to_ids(&spec.return_ids)?;
        let c = self.inner.clone();
        match kind {
            TaskKind::Normal | TaskKind::ActorTask => {
                // Returns at once; impossible requests surface as errors in the returns.
                c.enqueue(spec).map_err(rpc_err)?;
                self.ensure_sender_thread();
                self.inner.mark_reported_all(&return_ids_copy);
                Ok(None)
            }
            TaskKind::ActorCreation => {
                let (id, existing) =
                    py.detach(|| runtime().block_on(c.create_actor(spec, get_if_exists))).map_err(rpc_err)?;
                Ok(Some(CreatedActor { actor_id: id.to_vec(), existing }))
            }
        }
    }

    /// Ships a pickled function to this node's agent for `job_id`, which
    /// keeps it until that job (and every other that registered it) has ended.
    fn register_function(&self, py: Python<'_>, function_id: Vec<u8>, data: Vec<u8>, job_id: Vec<u8>) -> PyResult<()> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        py.detach(|| runtime().block_on(agent.register_function(FunctionBlob { function_id, data, job_id })))
            .map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    fn get_function<'py>(&self, py: Python<'py>, function_id: Vec<u8>) -> PyResult<Bound<'py, PyBytes>> {
        let mut agent = self.inner.driver();
        let blob = py
            .detach(|| runtime().block_on(agent.get_function(FunctionId { function_id })))
            .map_err(|s| rpc_err(s.into()))?;
        Ok(PyBytes::new(py, &blob.into_inner().data))
    }

    #[pyo3(signature = (object_id, force=false, recursive=true))]
    fn cancel(&self, py: Python<'_>, object_id: Vec<u8>, force: bool, recursive: bool) -> PyResult<()> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        py.detach(|| runtime().block_on(agent.cancel_task(CancelRequest { object_id, force, recursive })))
            .map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }
}
