//! Objects and references: counting references, serializing an object into
//! its place (`prepare`) and publishing it (`seal`), `get` and `wait`, and
//! mapping the locations the agent returns to `ObjectBuffer`s (node arenas are
//! mapped once per process).

use super::{Client, to_id, to_ids};
use crate::buffers::{ArenaMap, ObjectBuffer, PreparedObject, ViewRelease, prepare};
use crate::error::MapError;
use crate::error::client_error as rpc_err;
use crate::runtime;
use oxray_runtime::ids::ObjectId;
use oxray_runtime::proto::ObjectLocation;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The deadline of a user's `timeout`: None (and `inf`, or a timeout too long
/// to represent) waits without limit; NaN and negative values are refused.
pub(crate) fn deadline_after(timeout_s: Option<f64>) -> PyResult<Option<Instant>> {
    let Some(t) = timeout_s else { return Ok(None) };
    if t.is_nan() || t < 0.0 {
        return Err(PyValueError::new_err(format!("timeout must be None or a number >= 0, got {t:?}")));
    }
    Ok(Duration::try_from_secs_f64(t).ok().and_then(|wait| Instant::now().checked_add(wait)))
}

/// Waits are cut into slices of at most a second so Ctrl-C is noticed between them.
fn next_slice_ms(deadline: Option<Instant>) -> i64 {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()).as_millis().min(1000) as i64,
        None => 1000,
    }
}

#[pymethods]
impl Client {
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
            |path| Ok(self.arena(path)?),
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

    /// Objects by id, in order; None when the timeout passed first. With
    /// `fail_fast`, the agent stops at the first object that holds a failed task's
    /// error: the list then holds that object alone (deserializing it raises).
    /// Long waits are sliced so Ctrl-C is noticed.
    #[pyo3(signature = (ids, timeout_s=None, fail_fast=false))]
    fn get(
        &self,
        py: Python<'_>,
        ids: Vec<Vec<u8>>,
        timeout_s: Option<f64>,
        fail_fast: bool,
    ) -> PyResult<Option<Vec<ObjectBuffer>>> {
        let deadline = deadline_after(timeout_s)?;
        let ids = to_ids(&ids)?;
        loop {
            let slice_ms = next_slice_ms(deadline);
            let c = self.inner.clone();
            let got =
                py.detach(|| runtime().block_on(c.get_objects_or_error(&ids, slice_ms, fail_fast))).map_err(rpc_err)?;
            if let Some(got) = got {
                return py.detach(|| self.map_locations(got.into_objects())).map(Some);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// The ids of those objects that are ready, once `num_returns` are or the
    /// timeout passed.
    #[pyo3(signature = (ids, num_returns, timeout_s=None))]
    fn wait(
        &self,
        py: Python<'_>,
        ids: Vec<Vec<u8>>,
        num_returns: u32,
        timeout_s: Option<f64>,
    ) -> PyResult<Vec<Vec<u8>>> {
        let deadline = deadline_after(timeout_s)?;
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
}

impl Client {
    fn arena(&self, path: &str) -> Result<Arc<ArenaMap>, MapError> {
        if let Some(map) = self.arenas.lock().get(path) {
            return Ok(map.clone());
        }
        let map = Arc::new(ArenaMap(oxray_object_store::map_arena(std::path::Path::new(path))?));
        self.arenas.lock().insert(path.to_string(), map.clone());
        Ok(map)
    }

    fn buffer_for(&self, loc: ObjectLocation) -> Result<ObjectBuffer, MapError> {
        use oxray_runtime::proto::object_location::Place;
        match loc.place {
            Some(Place::Arena(range)) => {
                let id = ObjectId::from_bytes(&loc.object_id)?;
                // Report the view as released even if mapping fails below.
                let release = ViewRelease { client: self.inner.clone(), id };
                let map = self.arena(&range.path)?;
                let (offset, len) = (range.offset as usize, loc.size as usize);
                if offset.checked_add(len).is_none_or(|end| end > map.0.len()) {
                    return Err(MapError::OutsideArena(id));
                }
                Ok(ObjectBuffer::arena_view(map, offset, len, release))
            }
            _ => ObjectBuffer::from_location(loc),
        }
    }

    /// Maps each location; a file moved by spilling meanwhile is looked up again.
    pub(super) fn map_locations(&self, locations: Vec<ObjectLocation>) -> PyResult<Vec<ObjectBuffer>> {
        let mut out = Vec::with_capacity(locations.len());
        for loc in locations {
            let id = loc.object_id.clone();
            match self.buffer_for(loc) {
                Ok(b) => out.push(b),
                Err(first) => {
                    let again = runtime().block_on(self.inner.get_objects(&[to_id(&id)?], 10_000)).map_err(rpc_err)?;
                    let loc = again.and_then(|mut v| v.pop()).ok_or_else(|| PyErr::from(first))?;
                    out.push(self.buffer_for(loc)?);
                }
            }
        }
        Ok(out)
    }
}
