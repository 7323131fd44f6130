//! Actors: killing one, and looking actors up (by name, by id, all of them)
//! as dicts.

use super::Client;
use crate::error::client_error as rpc_err;
use crate::runtime;
use oxray_runtime::proto::{ActorInfo, ActorRequest, Empty, GetNamedActorRequest};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

#[pymethods]
impl Client {
    #[pyo3(signature = (actor_id, no_restart=true))]
    fn kill_actor(&self, py: Python<'_>, actor_id: Vec<u8>, no_restart: bool) -> PyResult<()> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        py.detach(|| runtime().block_on(agent.kill_actor(ActorRequest { actor_id, no_restart })))
            .map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// The live actor with this name in this namespace, None if there is none.
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
