//! The worker side: opening the assignment stream, taking the next
//! `Assignment` (its reference arguments already mapped), and reporting a
//! task done.

use super::Client;
use crate::buffers::{ObjectBuffer, PreparedObject};
use crate::error::client_error as rpc_err;
use crate::records::Assignment;
use crate::{OxrayRpcError, runtime};
use oxray_runtime::proto::{self, TaskDoneRequest, task_arg};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

impl Client {
    /// The next message on the assignment stream, None on timeout.
    fn read_assignment(&self, py: Python<'_>, timeout_s: Option<f64>) -> PyResult<Option<Box<proto::Assignment>>> {
        // Taken out while waiting: the stream is moved into the GIL-free section.
        let mut stream =
            self.assignments.lock().take().ok_or_else(|| PyValueError::new_err("worker_connect() was not called"))?;
        let deadline = super::objects::deadline_after(timeout_s)?;
        let wake = &self.worker_loop_wake;
        let (item, stream) = py.detach(move || {
            let item = runtime().block_on(async {
                let read = async {
                    match deadline {
                        Some(d) => tokio::time::timeout_at(d.into(), stream.message()).await.ok(),
                        None => Some(stream.message().await),
                    }
                };
                tokio::select! {
                    item = read => item,
                    () = wake.notified() => None,
                }
            });
            (item, stream)
        });
        *self.assignments.lock() = Some(stream);
        match item {
            None => Ok(None),
            Some(Ok(Some(a))) => Ok(Some(Box::new(a))),
            Some(Ok(None)) => Err(OxrayRpcError::new_err("the node agent closed the stream")),
            Some(Err(status)) => Err(OxrayRpcError::new_err(status.message().to_string())),
        }
    }

    /// Moves the messages that already arrived into `read_ahead`. A cancel of a call
    /// waiting there marks it instead of being passed on; returns whether one cancels
    /// `current` (the call about to be returned).
    fn read_ready_ahead(&self, py: Python<'_>, current: &[u8]) -> PyResult<bool> {
        let Some(mut stream) = self.assignments.lock().take() else { return Ok(false) };
        let (arrived, stream) = py.detach(move || {
            let mut arrived = Vec::new();
            runtime().block_on(async {
                // Each read is polled once: only what is already here. (A zero timeout would wait
                // for the timer's next tick, about 1 ms per actor call.) An error or the stream's
                // end stays for the next blocking read to report.
                while let Some(Ok(Some(a))) = poll_once(stream.message()).await {
                    arrived.push(a);
                }
            });
            (arrived, stream)
        });
        *self.assignments.lock() = Some(stream);
        let mut current_cancelled = false;
        let mut ahead = self.read_ahead.lock();
        for a in arrived {
            if !a.cancel_task_id.is_empty() {
                if a.cancel_task_id == current {
                    current_cancelled = true;
                    continue;
                }
                let waiting =
                    ahead.iter_mut().find(|(p, _)| p.task.as_ref().is_some_and(|t| t.task_id == a.cancel_task_id));
                if let Some((_, cancelled)) = waiting {
                    *cancelled = true;
                    continue;
                }
            }
            ahead.push_back((a, false));
        }
        Ok(current_cancelled)
    }
}

#[pymethods]
impl Client {
    /// Opens this worker's assignment stream.
    fn worker_connect(&self, py: Python<'_>) -> PyResult<()> {
        kill_group_when_orphaned();
        let c = self.inner.clone();
        let stream = py.detach(|| runtime().block_on(c.worker_connect())).map_err(rpc_err)?;
        *self.assignments.lock() = Some(stream);
        Ok(())
    }

    /// Ends the wait of `next_assignment` (now, or the next one's at once): the worker's loop
    /// has something to do besides assignments (`exit_actor()` outside any call).
    fn wake_worker_loop(&self) {
        self.worker_loop_wake.notify_one();
    }

    /// The next assignment, None on timeout (None: no timeout) or when woken; raises when the
    /// agent is gone. The calling thread reads the stream itself (in a worker the runtime runs
    /// on the calling threads), so a task reaches Python with no thread hand-off.
    #[pyo3(signature = (timeout_s=None))]
    fn next_assignment(&self, py: Python<'_>, timeout_s: Option<f64>) -> PyResult<Option<Assignment>> {
        let ahead = self.read_ahead.lock().pop_front();
        let (assignment, mut cancelled_before_start) = match ahead {
            Some((a, cancelled)) => (Box::new(a), cancelled),
            None => match self.read_assignment(py, timeout_s)? {
                Some(a) => (a, false),
                None => return Ok(None),
            },
        };
        let is_actor_call = assignment.task.as_ref().is_some_and(|t| t.kind == proto::TaskKind::ActorTask as i32);
        if is_actor_call {
            // The calls queued behind this one may have been cancelled already: a cancel of
            // one not started yet must keep it from running, so read what has arrived.
            let task_id = assignment.task.as_ref().map(|t| t.task_id.clone()).unwrap_or_default();
            cancelled_before_start |= self.read_ready_ahead(py, &task_id)?;
        }
        let proto::Assignment {
            task,
            resolved_args,
            cuda_visible_devices,
            functions_generation,
            exit,
            cancel_task_id,
            env,
        } = *assignment;
        let spec = task.unwrap_or_default();
        let env = env.unwrap_or_default();
        let mut task_env = spec.env_vars.clone();
        task_env.extend(env.during_task);
        let kept_env = env.kept.into_iter().map(|(name, value)| (name, Some(value)));
        let kept_env = kept_env.chain(env.removed.into_iter().map(|name| (name, None))).collect();
        let resolved = py.detach(|| self.map_locations(resolved_args))?;
        let mut resolved = resolved.into_iter();
        let mut args = Vec::with_capacity(spec.args.len());
        for arg in spec.args {
            let buf = match arg.kind {
                Some(task_arg::Kind::Value(v)) => ObjectBuffer::from_location_bytes(v),
                Some(task_arg::Kind::ObjectId(_)) => {
                    resolved.next().ok_or_else(|| PyValueError::new_err("missing resolved argument"))?
                }
                None => return Err(PyValueError::new_err("empty task argument")),
            };
            args.push(Py::new(py, buf)?);
        }
        Ok(Some(Assignment {
            kind: proto::TaskKind::try_from(spec.kind).unwrap_or(proto::TaskKind::Normal).into(),
            task_id: spec.task_id,
            function_id: spec.function_id,
            name: spec.name,
            args,
            kwarg_names: spec.kwarg_names,
            return_ids: spec.return_ids,
            actor_id: spec.actor_id,
            method_name: spec.method_name,
            env_vars: spec.env_vars,
            job_id: spec.job_id,
            max_concurrency: spec.max_concurrency,
            namespace: spec.namespace,
            job_namespace: spec.job_namespace,
            cuda_visible_devices,
            task_env,
            kept_env,
            resources: spec.resources,
            placement_group_id: spec.placement_group.map(|b| b.placement_group_id),
            capture_child_tasks: spec.capture_child_tasks,
            max_calls: spec.max_calls,
            retry_exception_types: spec.retry_exception_types,
            concurrency_group: spec.concurrency_group,
            concurrency_groups: spec.concurrency_groups,
            functions_generation,
            exit,
            cancel_task_id,
            cancelled_before_start,
        }))
    }

    /// Whether the agent cancelled `task_id`: asked when an interrupt reached
    /// this worker outside user code, so that a cancel is never lost nor hits
    /// another task.
    fn task_cancelled(&self, py: Python<'_>, task_id: Vec<u8>) -> PyResult<bool> {
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.task_cancelled(task_id))).map_err(rpc_err)
    }

    #[pyo3(signature = (task_id, returns, application_error=false, nested_refs=Vec::new(), method_names=Vec::new(),
        error_text=String::new(), retire=false, not_retryable=false, actor_exit=String::new()))]
    #[allow(clippy::too_many_arguments, reason = "one argument per keyword of task_done() in Python")]
    fn task_done(
        &self,
        py: Python<'_>,
        task_id: Vec<u8>,
        returns: Vec<PyRefMut<'_, PreparedObject>>,
        application_error: bool,
        nested_refs: Vec<Vec<u8>>,
        method_names: Vec<String>,
        error_text: String,
        retire: bool,
        not_retryable: bool,
        actor_exit: String,
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
            retire,
            not_retryable,
            actor_exit,
        };
        let Some(done) = self.inner.try_task_done_now(done) else { return Ok(()) };
        let c = self.inner.clone();
        py.detach(|| runtime().block_on(c.task_done(done))).map_err(rpc_err)
    }
}

/// The agent sets SIGTERM as a worker's parent-death signal. A worker that gets
/// it kills its whole process group (itself and what its tasks started) at once,
/// whatever Python is doing: a driver SIGKILLed with its embedded agent leaves
/// no task's child processes behind.
fn kill_group_when_orphaned() {
    extern "C" fn kill_own_group(_: libc::c_int) {
        // SAFETY: killpg is async-signal-safe; group 0 is this process's own group.
        unsafe { libc::killpg(0, libc::SIGKILL) };
    }
    // SAFETY: installs a handler that only makes one async-signal-safe call.
    unsafe { libc::signal(libc::SIGTERM, kill_own_group as *const () as libc::sighandler_t) };
}

/// `fut`'s output if it is ready at its first poll, else None (the future is dropped).
async fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}
