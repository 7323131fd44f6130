//! The per-process `Client`: the struct, its construction (connecting to the
//! node agent and starting the background flushers), and the helpers its
//! methods share. The methods are split by concern, each file one
//! `#[pymethods]` block of the same class (pyo3's `multiple-pymethods`):
//! objects and references (`objects.rs`), tasks and functions (`tasks.rs`),
//! actors (`actors.rs`), placement groups (`placement.rs`), the cluster's
//! nodes and logs (`nodes.rs`), Train runs' state for the head (`train.rs`),
//! and the worker side (`worker.rs`).

mod actors;
mod nodes;
mod objects;
mod placement;
mod tasks;
mod train;
mod worker;

pub(crate) use placement::is_placement_group_resource;

use crate::buffers::ArenaMap;
use crate::error::{bad_id, client_error as rpc_err};
use crate::runtime;
use oxray_runtime::client::{AssignmentStream, CoreClient};
use oxray_runtime::ids::{ClientId, JobId, ObjectId};
use oxray_runtime::proto;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Once, Weak};
use std::time::Duration;
use tokio::runtime::RuntimeFlavor;

fn to_id(raw: &[u8]) -> PyResult<ObjectId> {
    ObjectId::from_bytes(raw).map_err(bad_id)
}

fn to_ids(raw: &[Vec<u8>]) -> PyResult<Vec<ObjectId>> {
    raw.iter().map(|r| to_id(r)).collect()
}

#[pyclass(module = "oxray._native")]
pub(crate) struct Client {
    inner: Arc<CoreClient>,
    assignments: Mutex<Option<AssignmentStream>>,
    /// Assignments read from the stream ahead of their turn (behind an actor call), each
    /// with whether a cancel of it arrived before it started.
    read_ahead: Mutex<VecDeque<(proto::Assignment, bool)>>,
    /// Wakes a worker's loop waiting for its next assignment (`wake_worker_loop`).
    worker_loop_wake: tokio::sync::Notify,
    /// This process's mapping of each node arena it has seen (mapped once, kept warm).
    arenas: Mutex<HashMap<String, Arc<ArenaMap>>>,
    /// Started with the first submission in a process whose runtime has no threads.
    sender_thread: Once,
}

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
        // Reference drops are flushed in the background too, so idle drivers free memory: 50 ms
        // after a change, with the changes made meanwhile. An idle process sleeps (it wakes every
        // few seconds to notice that the client was dropped).
        let weak = Arc::downgrade(&inner);
        let changed = inner.refs_changed();
        runtime().spawn(async move {
            loop {
                let _ = tokio::time::timeout(Duration::from_secs(5), changed.notified()).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let Some(client) = weak.upgrade() else { break };
                if client.has_ref_changes() {
                    let _ = client.flush_refs().await;
                }
            }
        });
        runtime().spawn(CoreClient::run_sender(Arc::downgrade(&inner)));
        Ok(Client {
            inner,
            assignments: Mutex::new(None),
            read_ahead: Mutex::new(VecDeque::new()),
            worker_loop_wake: tokio::sync::Notify::new(),
            arenas: Mutex::new(HashMap::new()),
            sender_thread: Once::new(),
        })
    }

    #[getter]
    fn client_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.client_id.as_bytes())
    }

    /// Opens this driver's session with its agent (a joined driver; the embedded
    /// one is only reported to the head): when it ends, the agent cleans up after
    /// job `job_id`. `entrypoint` and `submission_id` are what the Jobs API lists.
    #[pyo3(signature = (job_id, entrypoint = String::new(), submission_id = String::new()))]
    fn open_driver_session(
        &self,
        py: Python<'_>,
        job_id: Vec<u8>,
        entrypoint: String,
        submission_id: String,
    ) -> PyResult<()> {
        let job = JobId::from_bytes(&job_id).map_err(bad_id)?;
        let c = self.inner.clone();
        let about = oxray_runtime::client::DriverAbout { entrypoint, submission_id };
        py.detach(|| runtime().block_on(c.open_driver_session(job, about))).map_err(rpc_err)
    }

    /// Ends the driver's session and waits until the agent has cleaned up after it.
    fn end_driver_session(&self, py: Python<'_>) {
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.end_driver_session()));
    }
}

impl Client {
    /// A worker's runtime runs only while one of its threads waits in a call
    /// (`OXRAY_RUNTIME_THREADS=0`), so `run_sender` would leave a task's
    /// submissions queued until its user code blocks or returns: a thread of
    /// its own ships them as soon as they are queued.
    fn ensure_sender_thread(&self) {
        if runtime().handle().runtime_flavor() != RuntimeFlavor::CurrentThread {
            return;
        }
        self.sender_thread.call_once(|| {
            let client = Arc::downgrade(&self.inner);
            let spawned =
                std::thread::Builder::new().name("oxray-submit".into()).spawn(move || send_when_queued(client));
            if let Err(e) = spawned {
                tracing::warn!("cannot start the submission thread ({e}); submissions wait until this task blocks");
            }
        });
    }

    /// Sends the submissions queued so far, so a later request sees them.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.flush_submissions())).map_err(rpc_err)
    }
}

/// How long a worker's submissions may wait for a `get` to carry them (the
/// submit-then-get pattern then costs one RPC, not two) before its submission
/// thread sends them itself.
const SUBMIT_GRACE: Duration = Duration::from_millis(1);

/// The submission thread of a process without runtime threads: sleeps until
/// something is queued, then, unless a call carried it meanwhile, drives the
/// runtime just long enough to send it. Ends when the client is dropped.
fn send_when_queued(client: Weak<CoreClient>) {
    loop {
        let Some(c) = client.upgrade() else { return };
        if c.wait_for_submissions(Duration::from_secs(1)) {
            std::thread::sleep(SUBMIT_GRACE);
            if c.has_queued() {
                runtime().block_on(c.send_queued());
            }
        }
    }
}
