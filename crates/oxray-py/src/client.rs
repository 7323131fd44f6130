//! The per-process client: submit work, move objects, count references, and
//! (in workers) receive assignments.

use crate::buffers::{ArenaMap, ObjectBuffer, PreparedObject, ViewRelease, prepare};
use crate::error::{bad_id, client_error as rpc_err};
use crate::{OxrayRpcError, runtime};
use oxray_runtime::client::{AssignmentStream, CoreClient};
use oxray_runtime::ids::{ClientId, JobId, ObjectId};
use oxray_runtime::placement::Strategy;
use oxray_runtime::proto::{
    ActorInfo, ActorRequest, Assignment, Bundle, CancelRequest, Empty, FunctionBlob, FunctionId, GetNamedActorRequest,
    PlacementGroupInfo, PlacementGroupRequest, PlacementGroupSpec, TaskArg, TaskDoneRequest, TaskKind, TaskSpec,
    task_arg,
};
use parking_lot::Mutex;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn to_id(raw: &[u8]) -> PyResult<ObjectId> {
    ObjectId::from_bytes(raw).map_err(bad_id)
}

fn to_ids(raw: &[Vec<u8>]) -> PyResult<Vec<ObjectId>> {
    raw.iter().map(|r| to_id(r)).collect()
}

fn deadline_after(timeout_s: Option<f64>) -> Option<Instant> {
    timeout_s.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)))
}

/// Waits are cut into slices of at most a second so Ctrl-C is noticed between them.
fn next_slice_ms(deadline: Option<Instant>) -> i64 {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()).as_millis().min(1000) as i64,
        None => 1000,
    }
}

#[pyclass(module = "oxray._native")]
pub struct Client {
    inner: Arc<CoreClient>,
    assignments: Mutex<Option<AssignmentStream>>,
    /// This process's mapping of each node arena it has seen (mapped once, kept warm).
    arenas: Mutex<HashMap<String, Arc<ArenaMap>>>,
}

/// A task argument from Python: (is_ref, bytes) — an object id or an encoded value.
type PyArg = (bool, Vec<u8>);

#[pymethods]
impl Client {
    #[new]
    /// `cluster`: the embedded cluster of this process, whose agent is then called
    /// directly instead of over the network.
    #[pyo3(signature = (address, token, client_id=None, cluster=None))]
    fn new(
        py: Python<'_>,
        address: String,
        token: String,
        client_id: Option<Vec<u8>>,
        cluster: Option<PyRef<'_, crate::cluster::Cluster>>,
    ) -> PyResult<Self> {
        let id = match client_id {
            Some(raw) => ClientId::from_bytes(&raw).map_err(bad_id)?,
            None => ClientId::random(),
        };
        let local = cluster.and_then(|c| c.local_service());
        let inner = py
            .detach(|| {
                runtime().block_on(async {
                    match local {
                        Some(service) => CoreClient::connect_local(&address, &token, id, service).await,
                        None => CoreClient::connect(&address, &token, id).await,
                    }
                })
            })
            .map_err(rpc_err)?;
        let inner = Arc::new(inner);
        // Reference drops are flushed in the background too, so idle drivers free memory.
        let weak = Arc::downgrade(&inner);
        runtime().spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                let Some(client) = weak.upgrade() else { break };
                if client.has_ref_changes() {
                    let _ = client.flush_refs().await;
                }
            }
        });
        runtime().spawn(CoreClient::run_sender(Arc::downgrade(&inner)));
        Ok(Client { inner, assignments: Mutex::new(None), arenas: Mutex::new(HashMap::new()) })
    }

    #[getter]
    fn client_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.client_id.as_bytes())
    }

    fn incref(&self, id: &[u8]) -> PyResult<()> {
        self.inner.incref(to_id(id)?);
        Ok(())
    }

    fn decref(&self, id: &[u8]) -> PyResult<()> {
        self.inner.decref(to_id(id)?);
        Ok(())
    }

    fn flush_refs(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.flush_refs())).map_err(rpc_err)
    }

    /// Serializes an object into its final place (inline or a reserved shm file).
    fn prepare(
        &self,
        py: Python<'_>,
        id: &[u8],
        pickle: &[u8],
        buffers: Vec<PyBuffer<u8>>,
        flags: u32,
    ) -> PyResult<PreparedObject> {
        let oid = to_id(id)?;
        let c = self.inner.clone();
        let loc = prepare(
            py,
            id,
            pickle,
            &buffers,
            flags,
            |py, size| py.detach(|| runtime().block_on(c.create_object(oid, size))).map_err(rpc_err),
            |path| self.arena(path).map_err(OxrayRpcError::new_err),
        )?;
        Ok(PreparedObject { location: Some(loc) })
    }

    /// Makes a prepared object readable and records this process as its holder.
    fn seal(&self, py: Python<'_>, prepared: &mut PreparedObject, nested: Vec<Vec<u8>>) -> PyResult<()> {
        let loc = prepared.location.take().ok_or_else(|| PyValueError::new_err("object already sealed"))?;
        let id = to_id(&loc.object_id)?;
        let c = self.inner.clone();
        let nested = to_ids(&nested)?;
        py.detach(|| runtime().block_on(c.seal_object(loc, &nested))).map_err(rpc_err)?;
        self.inner.mark_reported(id);
        Ok(())
    }

    /// Objects by id, in order; None when the timeout passed first. Long waits
    /// are sliced so Ctrl-C is noticed.
    #[pyo3(signature = (ids, timeout_s=None))]
    fn get(&self, py: Python<'_>, ids: Vec<Vec<u8>>, timeout_s: Option<f64>) -> PyResult<Option<Vec<ObjectBuffer>>> {
        let deadline = deadline_after(timeout_s);
        let ids = to_ids(&ids)?;
        loop {
            let slice_ms = next_slice_ms(deadline);
            let c = self.inner.clone();
            let got = py.detach(|| runtime().block_on(c.get_objects(&ids, slice_ms))).map_err(rpc_err)?;
            if let Some(locations) = got {
                return py.detach(|| self.map_locations(locations)).map(Some);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    #[pyo3(signature = (ids, num_returns, timeout_s=None))]
    fn wait(
        &self,
        py: Python<'_>,
        ids: Vec<Vec<u8>>,
        num_returns: u32,
        timeout_s: Option<f64>,
    ) -> PyResult<Vec<Vec<u8>>> {
        let deadline = deadline_after(timeout_s);
        let ids = to_ids(&ids)?;
        loop {
            let slice_ms = next_slice_ms(deadline);
            let c = self.inner.clone();
            let ready =
                py.detach(|| runtime().block_on(c.wait_objects(&ids, num_returns, slice_ms))).map_err(rpc_err)?;
            if ready.len() >= num_returns as usize || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(ready.into_iter().map(ObjectId::to_vec).collect());
            }
            py.check_signals()?;
        }
    }

    /// Submits a task, an actor creation or an actor call. Returns an error
    /// message when the request can never be scheduled ("" otherwise), or for
    /// an actor creation, the (actor id, existed) pair as a dict.
    #[pyo3(signature = (*, kind, task_id, function_id, name, args, kwarg_names, return_ids, resources,
        max_retries=0, retry_exceptions=false, actor_id=None, method_name=String::new(),
        env_vars=HashMap::new(), nested_refs=Vec::new(), job_id=Vec::new(), max_restarts=0, max_task_retries=0,
        max_concurrency=1, actor_name=String::new(), namespace=String::new(), detached=false,
        placement_resources=HashMap::new(), get_if_exists=false))]
    #[allow(clippy::too_many_arguments)]
    fn submit<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
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
    ) -> PyResult<Bound<'py, PyDict>> {
        let kind = match kind {
            "task" => TaskKind::Normal,
            "actor_creation" => TaskKind::ActorCreation,
            "actor_task" => TaskKind::ActorTask,
            other => return Err(PyValueError::new_err(format!("unknown task kind {other:?}"))),
        };
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
            kind: kind as i32,
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
        };
        let return_ids_copy = to_ids(&spec.return_ids)?;
        let c = self.inner.clone();
        let out = PyDict::new(py);
        match kind {
            TaskKind::Normal | TaskKind::ActorTask => {
                // Returns at once; impossible requests surface as errors in the returns.
                c.enqueue(spec).map_err(rpc_err)?;
                self.inner.mark_reported_all(&return_ids_copy);
            }
            TaskKind::ActorCreation => {
                let (id, existing) =
                    py.detach(|| runtime().block_on(c.create_actor(spec, get_if_exists))).map_err(rpc_err)?;
                out.set_item("actor_id", PyBytes::new(py, id.as_bytes()))?;
                out.set_item("existing", existing)?;
            }
        }
        Ok(out)
    }

    fn register_function(&self, py: Python<'_>, function_id: Vec<u8>, data: Vec<u8>) -> PyResult<()> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        py.detach(|| runtime().block_on(agent.register_function(FunctionBlob { function_id, data })))
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

    #[pyo3(signature = (object_id, force=false))]
    fn cancel(&self, py: Python<'_>, object_id: Vec<u8>, force: bool) -> PyResult<()> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        py.detach(|| runtime().block_on(agent.cancel_task(CancelRequest { object_id, force })))
            .map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    #[pyo3(signature = (actor_id, no_restart=true))]
    fn kill_actor(&self, py: Python<'_>, actor_id: Vec<u8>, no_restart: bool) -> PyResult<()> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        py.detach(|| runtime().block_on(agent.kill_actor(ActorRequest { actor_id, no_restart })))
            .map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    fn get_named_actor<'py>(
        &self,
        py: Python<'py>,
        name: String,
        namespace: String,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py
            .detach(|| runtime().block_on(agent.get_named_actor(GetNamedActorRequest { name, namespace })))
            .map_err(|s| rpc_err(s.into()))?
            .into_inner();
        reply.actor.filter(|_| reply.found).map(|a| actor_dict(py, &a)).transpose()
    }

    fn get_actor_info<'py>(&self, py: Python<'py>, actor_id: Vec<u8>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py
            .detach(|| runtime().block_on(agent.get_actor_info(ActorRequest { actor_id, no_restart: false })))
            .map_err(|s| rpc_err(s.into()))?
            .into_inner();
        reply.actor.filter(|_| reply.found).map(|a| actor_dict(py, &a)).transpose()
    }

    fn list_actors<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py.detach(|| runtime().block_on(agent.list_actors(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        reply.into_inner().actors.iter().map(|a| actor_dict(py, a)).collect()
    }

    /// Prints the output of this job's workers on other nodes in this
    /// terminal (and on this node too when `skip_address` is None).
    #[pyo3(signature = (token, job_id, skip_address=None))]
    fn follow_logs(
        &self,
        py: Python<'_>,
        token: String,
        job_id: Vec<u8>,
        skip_address: Option<String>,
    ) -> PyResult<()> {
        let c = self.inner.clone();
        let job_id = JobId::from_optional_bytes(&job_id).map_err(bad_id)?;
        py.detach(|| runtime().block_on(c.follow_logs(token, job_id, skip_address)));
        Ok(())
    }

    fn cluster_info<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py.detach(|| runtime().block_on(agent.cluster_info(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        reply
            .into_inner()
            .nodes
            .into_iter()
            .map(|n| {
                let d = PyDict::new(py);
                d.set_item("node_id", hex::encode(&n.node_id))?;
                d.set_item("address", n.address)?;
                d.set_item("ip", n.ip)?;
                d.set_item("alive", n.alive)?;
                d.set_item("total", n.total)?;
                d.set_item("available", n.available)?;
                d.set_item("is_head", n.is_head)?;
                d.set_item("session_dir", n.session_dir)?;
                d.set_item("start_time_ms", n.start_time_ms)?;
                Ok(d)
            })
            .collect()
    }

    // ------------------------------------------------------ placement groups

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
        let strategy = Strategy::parse(&strategy).map_err(|e| PyValueError::new_err(e.to_string()))?;
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

    // ------------------------------------------------------------ worker side

    /// Opens this worker's assignment stream.
    fn worker_connect(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.inner.clone();
        let stream = py.detach(|| runtime().block_on(c.worker_connect())).map_err(rpc_err)?;
        *self.assignments.lock() = Some(stream);
        Ok(())
    }

    /// The next assignment as a dict, None on timeout; raises when the agent is gone.
    /// The calling thread reads the stream itself (in a worker the runtime runs on
    /// the calling threads), so a task reaches Python with no thread hand-off.
    fn next_assignment<'py>(&self, py: Python<'py>, timeout_s: f64) -> PyResult<Option<Bound<'py, PyDict>>> {
        // Taken out while waiting: the stream is moved into the GIL-free section.
        let mut stream =
            self.assignments.lock().take().ok_or_else(|| PyValueError::new_err("worker_connect() was not called"))?;
        let wait = Duration::from_secs_f64(timeout_s);
        let (item, stream) = py.detach(move || {
            let item = runtime().block_on(async { tokio::time::timeout(wait, stream.message()).await });
            (item, stream)
        });
        *self.assignments.lock() = Some(stream);
        let assignment = match item {
            Err(_elapsed) => return Ok(None),
            Ok(Ok(Some(a))) => Box::new(a),
            Ok(Ok(None)) => return Err(OxrayRpcError::new_err("the node agent closed the stream")),
            Ok(Err(status)) => return Err(OxrayRpcError::new_err(status.message().to_string())),
        };
        let Assignment { task, resolved_args, cuda_visible_devices, .. } = *assignment;
        let spec = task.unwrap_or_default();
        let resolved = py.detach(|| self.map_locations(resolved_args))?;
        let mut resolved = resolved.into_iter();
        let d = PyDict::new(py);
        let mut args = Vec::new();
        for arg in spec.args {
            match arg.kind {
                Some(task_arg::Kind::Value(v)) => args.push(Py::new(py, ObjectBuffer::from_location_bytes(v))?),
                Some(task_arg::Kind::ObjectId(_)) => {
                    let buf = resolved.next().ok_or_else(|| PyValueError::new_err("missing resolved argument"))?;
                    args.push(Py::new(py, buf)?);
                }
                None => return Err(PyValueError::new_err("empty task argument")),
            }
        }
        let kind = match spec.kind {
            k if k == TaskKind::ActorCreation as i32 => "actor_creation",
            k if k == TaskKind::ActorTask as i32 => "actor_task",
            _ => "task",
        };
        d.set_item("kind", kind)?;
        d.set_item("task_id", PyBytes::new(py, &spec.task_id))?;
        d.set_item("function_id", PyBytes::new(py, &spec.function_id))?;
        d.set_item("name", spec.name)?;
        d.set_item("args", args)?;
        d.set_item("kwarg_names", spec.kwarg_names)?;
        d.set_item("return_ids", spec.return_ids.iter().map(|r| PyBytes::new(py, r)).collect::<Vec<_>>())?;
        d.set_item("actor_id", PyBytes::new(py, &spec.actor_id))?;
        d.set_item("method_name", spec.method_name)?;
        d.set_item("env_vars", spec.env_vars)?;
        d.set_item("job_id", PyBytes::new(py, &spec.job_id))?;
        d.set_item("max_concurrency", spec.max_concurrency)?;
        d.set_item("namespace", spec.namespace)?;
        d.set_item("cuda_visible_devices", cuda_visible_devices)?;
        Ok(Some(d))
    }

    #[pyo3(signature = (task_id, returns, application_error=false, nested_refs=Vec::new(), method_names=Vec::new(), error_text=String::new()))]
    #[allow(clippy::too_many_arguments)]
    fn task_done(
        &self,
        py: Python<'_>,
        task_id: Vec<u8>,
        returns: Vec<PyRefMut<'_, PreparedObject>>,
        application_error: bool,
        nested_refs: Vec<Vec<u8>>,
        method_names: Vec<String>,
        error_text: String,
    ) -> PyResult<()> {
        let returns = returns.into_iter().filter_map(|mut p| p.location.take()).collect();
        let done = TaskDoneRequest {
            worker_id: self.inner.client_id.to_vec(),
            task_id,
            returns,
            application_error,
            nested_refs,
            ref_deltas: None,
            method_names,
            error_text,
        };
        let Some(done) = self.inner.try_task_done_now(done) else { return Ok(()) };
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.task_done(done))).map_err(rpc_err)
    }
}

impl Client {
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.flush_submissions())).map_err(rpc_err)
    }

    fn arena(&self, path: &str) -> Result<Arc<ArenaMap>, String> {
        if let Some(map) = self.arenas.lock().get(path) {
            return Ok(map.clone());
        }
        let map =
            Arc::new(ArenaMap(oxray_object_store::map_arena(std::path::Path::new(path)).map_err(|e| e.to_string())?));
        self.arenas.lock().insert(path.to_string(), map.clone());
        Ok(map)
    }

    fn buffer_for(&self, loc: oxray_runtime::proto::ObjectLocation) -> Result<ObjectBuffer, String> {
        use oxray_runtime::proto::object_location::Place;
        match loc.place {
            Some(Place::Arena(range)) => {
                let id = ObjectId::from_bytes(&loc.object_id).map_err(|e| e.to_string())?;
                // Report the view as released even if mapping fails below.
                let release = ViewRelease { client: self.inner.clone(), id };
                let map = self.arena(&range.path)?;
                let (offset, len) = (range.offset as usize, loc.size as usize);
                if offset + len > map.0.len() {
                    return Err(format!("object {id} lies outside the arena"));
                }
                Ok(ObjectBuffer::arena_view(map, offset, len, release))
            }
            _ => ObjectBuffer::from_location(loc),
        }
    }

    /// Maps each location; a file moved by spilling meanwhile is looked up again.
    fn map_locations(&self, locations: Vec<oxray_runtime::proto::ObjectLocation>) -> PyResult<Vec<ObjectBuffer>> {
        let mut out = Vec::with_capacity(locations.len());
        for loc in locations {
            let id = loc.object_id.clone();
            match self.buffer_for(loc) {
                Ok(b) => out.push(b),
                Err(first) => {
                    let again = runtime().block_on(self.inner.get_objects(&[to_id(&id)?], 10_000)).map_err(rpc_err)?;
                    let loc = again.and_then(|mut v| v.pop()).ok_or_else(|| OxrayRpcError::new_err(first.clone()))?;
                    out.push(self.buffer_for(loc).map_err(OxrayRpcError::new_err)?);
                }
            }
        }
        Ok(out)
    }
}

fn actor_dict<'py>(py: Python<'py>, a: &ActorInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("actor_id", PyBytes::new(py, &a.actor_id))?;
    d.set_item("class_name", &a.class_name)?;
    d.set_item("state", actor_state_name(a.state()))?;
    d.set_item("name", &a.name)?;
    d.set_item("namespace", &a.namespace)?;
    d.set_item("pid", a.pid)?;
    d.set_item("num_restarts", a.num_restarts)?;
    d.set_item("death_cause", &a.death_cause)?;
    d.set_item("method_names", a.method_names.clone())?;
    d.set_item("max_task_retries", a.max_task_retries)?;
    Ok(d)
}

/// Ray's name of an actor state.
fn actor_state_name(state: oxray_runtime::proto::ActorState) -> &'static str {
    use oxray_runtime::proto::ActorState as S;
    match state {
        S::PendingCreation | S::Unspecified => "PENDING_CREATION",
        S::Alive => "ALIVE",
        S::Restarting => "RESTARTING",
        S::Dead => "DEAD",
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
