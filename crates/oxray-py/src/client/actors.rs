//! Actors: killing one, and looking actors up (by name, by id, all of them)
//! as `ActorInfo` records.

use super::Client;
use crate::error::client_error as rpc_err;
use crate::records::ActorInfo;
use crate::runtime;
use oxray_runtime::proto::{ActorRequest, Empty, GetNamedActorRequest};
use pyo3::prelude::*;

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
    fn get_named_actor(&self, py: Python<'_>, name: String, namespace: String) -> PyResult<Option<ActorInfo>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py
            .detach(|| runtime().block_on(agent.get_named_actor(GetNamedActorRequest { name, namespace })))
            .map_err(|s| rpc_err(s.into()))?
            .into_inner();
        Ok(reply.actor.filter(|_| reply.found).map(ActorInfo::from))
    }

    fn get_actor_info(&self, py: Python<'_>, actor_id: Vec<u8>) -> PyResult<Option<ActorInfo>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py
            .detach(|| runtime().block_on(agent.get_actor_info(ActorRequest { actor_id, ..Default::default() })))
            .map_err(|s| rpc_err(s.into()))?
            .into_inner();
        Ok(reply.actor.filter(|_| reply.found).map(ActorInfo::from))
    }

    fn list_actors(&self, py: Python<'_>) -> PyResult<Vec<ActorInfo>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py.detach(|| runtime().block_on(agent.list_actors(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        Ok(reply.into_inner().actors.into_iter().map(ActorInfo::from).collect())
    }
}
