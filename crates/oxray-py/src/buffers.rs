//! Object bytes as Python sees them: `ObjectBuffer` exposes an object's bytes
//! (inline or a read-only shared-memory mapping) through the buffer protocol,
//! so pickle-5 out-of-band buffers and numpy arrays view them without copying.

use crate::error::MapError;
use oxray_object_store::{
    INLINE_THRESHOLD, Layout, MappedObject, create_object_file, map_object_file, plan, write_object,
};
use oxray_runtime::client::CoreClient;
use oxray_runtime::ids::ObjectId;
use oxray_runtime::proto::{ObjectLocation, object_location::Place};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::Arc;

/// A process's one mapping of its node's arena.
pub(crate) struct ArenaMap(pub memmap2::MmapRaw);

/// Tells the agent when a view of an arena range is gone, so the range can be reused.
pub(crate) struct ViewRelease {
    pub client: Arc<CoreClient>,
    pub id: ObjectId,
}

impl Drop for ViewRelease {
    fn drop(&mut self) {
        self.client.release_view(self.id);
    }
}

enum Bytes {
    Owned(Vec<u8>),
    Mapped(MappedObject),
    Arena { map: Arc<ArenaMap>, offset: usize, len: usize, _release: ViewRelease },
}

#[pyclass(frozen, module = "oxray._native")]
pub(crate) struct ObjectBuffer {
    bytes: Bytes,
}

impl ObjectBuffer {
    fn data(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m.bytes(),
            // SAFETY: the agent keeps this range allocated to the object until the
            // view is released (ViewRelease), and sealed objects are never written.
            Bytes::Arena { map, offset, len, .. } => unsafe {
                std::slice::from_raw_parts(map.0.as_ptr().add(*offset), *len)
            },
        }
    }

    pub(crate) fn arena_view(map: Arc<ArenaMap>, offset: usize, len: usize, release: ViewRelease) -> Self {
        ObjectBuffer { bytes: Bytes::Arena { map, offset, len, _release: release } }
    }

    pub(crate) fn from_location_bytes(data: Vec<u8>) -> Self {
        ObjectBuffer { bytes: Bytes::Owned(data) }
    }

    pub(crate) fn from_location(loc: ObjectLocation) -> Result<Self, MapError> {
        match loc.place {
            Some(Place::InlineData(data)) => Ok(ObjectBuffer { bytes: Bytes::Owned(data) }),
            Some(Place::Path(path)) => map_object_file(Path::new(&path))
                .map(|m| ObjectBuffer { bytes: Bytes::Mapped(m) })
                .map_err(MapError::from),
            Some(Place::Arena(_)) => Err(MapError::ArenaView),
            None => Err(MapError::Empty),
        }
    }
}

#[pymethods]
impl ObjectBuffer {
    /// (flags, (pickle start, end), [(buffer start, end), ...]) within this buffer.
    #[allow(clippy::type_complexity, reason = "the plain tuple is what the Python side unpacks")]
    fn layout(&self) -> PyResult<(u32, (usize, usize), Vec<(usize, usize)>)> {
        let parsed = oxray_object_store::parse(self.data()).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok((
            parsed.flags,
            (parsed.pickle.start, parsed.pickle.end),
            parsed.buffers.iter().map(|r| (r.start, r.end)).collect(),
        ))
    }

    fn __len__(&self) -> usize {
        self.data().len()
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        if (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("oxray objects are read-only"));
        }
        let data = slf.get().data();
        // SAFETY: the bytes live as long as `slf`, which the view keeps a reference to.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), data.as_ptr() as *mut _, data.len() as isize, 1, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// A serialized object ready to hand to the agent: inline bytes or a sealed-to-be file.
#[pyclass(module = "oxray._native")]
pub(crate) struct PreparedObject {
    pub location: Option<ObjectLocation>,
}

struct RawSlice(*const u8, usize);
// SAFETY: the Python buffers these point into are kept alive (PyBuffer held)
// by the caller for the whole time the slices are used.
unsafe impl Send for RawSlice {}

impl RawSlice {
    /// SAFETY: the memory must be valid for the returned lifetime.
    unsafe fn bytes<'a>(&self) -> &'a [u8] {
        // SAFETY: the caller guarantees the memory is valid for 'a.
        unsafe { std::slice::from_raw_parts(self.0, self.1) }
    }

    /// SAFETY: the memory must be valid, writable and unaliased for the returned lifetime.
    #[allow(clippy::mut_from_ref, reason = "hands back the caller's own buffer; see the SAFETY notes")]
    unsafe fn bytes_mut<'a>(&self) -> &'a mut [u8] {
        // SAFETY: the caller guarantees the memory is valid, writable and unaliased for 'a.
        unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u8, self.1) }
    }
}

pub(crate) fn collect_buffers(buffers: &[PyBuffer<u8>]) -> PyResult<Vec<(*const u8, usize)>> {
    buffers
        .iter()
        .map(|b| {
            if !b.is_c_contiguous() {
                return Err(PyBufferError::new_err("out-of-band pickle buffers must be C-contiguous"));
            }
            Ok((b.buf_ptr() as *const u8, b.len_bytes()))
        })
        .collect()
}

pub(crate) fn layout_for(pickle: &[u8], raw: &[(*const u8, usize)]) -> Layout {
    let lens: Vec<usize> = raw.iter().map(|(_, l)| *l).collect();
    plan(pickle.len(), &lens)
}

/// Writes the object into `dst` without holding the GIL.
pub(crate) fn write_into(
    py: Python<'_>,
    dst: &mut [u8],
    layout: &Layout,
    flags: u32,
    pickle: &[u8],
    raw: &[(*const u8, usize)],
) {
    let slices: Vec<RawSlice> = raw.iter().map(|(p, l)| RawSlice(*p, *l)).collect();
    let dst_ptr = RawSlice(dst.as_mut_ptr(), dst.len());
    let pickle_raw = RawSlice(pickle.as_ptr(), pickle.len());
    py.detach(move || {
        // SAFETY: see RawSlice: the Python buffers are held by the caller for this call.
        let bufs: Vec<&[u8]> = slices.iter().map(|s| unsafe { s.bytes() }).collect();
        // SAFETY: dst is this object's own reservation, written by nobody else.
        let dst = unsafe { dst_ptr.bytes_mut() };
        // SAFETY: the pickle bytes outlive this closure (the caller holds them).
        let pickle = unsafe { pickle_raw.bytes() };
        write_object(dst, layout, flags, pickle, &bufs);
    });
}

/// Serializes into inline bytes (used for small task arguments).
#[pyfunction]
pub(crate) fn encode_object<'py>(
    py: Python<'py>,
    pickle: &[u8],
    buffers: Vec<PyBuffer<u8>>,
    flags: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let raw = collect_buffers(&buffers)?;
    let layout = layout_for(pickle, &raw);
    let mut out = vec![0u8; layout.total_size];
    write_into(py, &mut out, &layout, flags, pickle, &raw);
    Ok(PyBytes::new(py, &out))
}

/// Builds an object's location: inline for small objects; otherwise written
/// where `reserve` says (an arena range, mapped through `arena`, or a file).
pub(crate) fn prepare(
    py: Python<'_>,
    id: &[u8],
    pickle: &[u8],
    buffers: &[PyBuffer<u8>],
    flags: u32,
    reserve: impl FnOnce(Python<'_>, usize) -> PyResult<ObjectLocation>,
    arena: impl FnOnce(&str) -> PyResult<Arc<ArenaMap>>,
) -> PyResult<ObjectLocation> {
    let raw = collect_buffers(buffers)?;
    let layout = layout_for(pickle, &raw);
    let size = layout.total_size;
    if size <= INLINE_THRESHOLD {
        let mut out = vec![0u8; size];
        write_into(py, &mut out, &layout, flags, pickle, &raw);
        return Ok(ObjectLocation { object_id: id.to_vec(), place: Some(Place::InlineData(out)), size: size as u64 });
    }
    let location = reserve(py, size)?;
    match &location.place {
        Some(Place::Arena(range)) => {
            let map = arena(&range.path)?;
            let offset = range.offset as usize;
            if offset + size > map.0.len() {
                return Err(PyValueError::new_err("arena range out of bounds"));
            }
            // SAFETY: the agent reserved [offset, offset+size) for this object alone.
            let dst = unsafe { std::slice::from_raw_parts_mut(map.0.as_mut_ptr().add(offset), size) };
            write_into(py, dst, &layout, flags, pickle, &raw);
        }
        Some(Place::Path(path)) => {
            let mut map = create_object_file(Path::new(path), size).map_err(|e| match e {
                e @ oxray_object_store::ShmError::NoSpace { .. } => PyErr::from(MapError::from(e)),
                e => PyValueError::new_err(e.to_string()),
            })?;
            write_into(py, &mut map, &layout, flags, pickle, &raw);
        }
        _ => return Err(PyValueError::new_err("the agent returned no place to write the object")),
    }
    Ok(ObjectLocation { object_id: id.to_vec(), place: location.place, size: size as u64 })
}
