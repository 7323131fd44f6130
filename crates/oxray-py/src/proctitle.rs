//! Worker process titles as Ray shows them (`ray::IDLE`, `ray::f`,
//! `ray::Counter.incr`): written over the process's own argv strings, so `ps`,
//! `top` and `/proc/<pid>/cmdline` show them, and set as the thread name (`comm`).

use parking_lot::Mutex;
use pyo3::prelude::*;
use std::sync::OnceLock;

unsafe extern "C" {
    /// glibc's pointer to `argv[0]`, set before `main` and never moved.
    static program_invocation_name: *mut libc::c_char;
}

/// The contiguous argv strings of this process: `len` bytes from `start`.
struct ArgvArea {
    start: *mut u8,
    len: usize,
}

// SAFETY: the area is this process's own argv memory, valid for its whole life;
// every write goes through the mutex around it.
unsafe impl Send for ArgvArea {}

static AREA: OnceLock<Option<Mutex<ArgvArea>>> = OnceLock::new();

/// The argv area, when `argv[0]` is where glibc says and `/proc/self/cmdline`
/// (the kernel's view of the area) agrees with it byte for byte.
fn find_area() -> Option<ArgvArea> {
    let cmdline = std::fs::read("/proc/self/cmdline").ok()?;
    let first_len = cmdline.iter().position(|&b| b == 0)?;
    // SAFETY: reading a pointer-sized static glibc initialised before main.
    let start = unsafe { program_invocation_name }.cast::<u8>();
    if start.is_null() {
        return None;
    }
    // SAFETY: `start` is argv[0], a NUL-terminated string; only its first
    // `first_len` bytes are read, and only after /proc said that is its length.
    let first = unsafe { std::slice::from_raw_parts(start, first_len) };
    (first == &cmdline[..first_len]).then_some(ArgvArea { start, len: cmdline.len() })
}

/// Shows `title` as this process's command line (cut to the original
/// command line's length) and thread name (cut to 15 bytes). False when the
/// argv area could not be found, so nothing was written.
#[pyfunction]
pub(crate) fn set_process_title(title: &str) -> bool {
    let Some(area) = AREA.get_or_init(|| find_area().map(Mutex::new)) else { return false };
    let area = area.lock();
    let bytes = title.as_bytes();
    let n = bytes.len().min(area.len.saturating_sub(1));
    // SAFETY: [start, start + len) is the argv area (see `find_area`); n < len,
    // and the rest is zeroed so the area still ends with a NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), area.start, n);
        std::ptr::write_bytes(area.start.add(n), 0, area.len - n);
    }
    let mut comm = [0u8; 16];
    let short = &bytes[..bytes.len().min(15)];
    comm[..short.len()].copy_from_slice(short);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, comm.as_ptr()) };
    true
}
