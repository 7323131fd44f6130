//! Worker output printed through Python's `sys.stdout` and `sys.stderr`, as Ray's driver prints
//! it: what tasks print then shows where the driver's own prints do (a notebook's cell, a test's
//! capture), not only on the process's file descriptors.
//!
//! The runtime's printer thread is not a Python thread: it attaches to the interpreter for each
//! batch of lines, and must never do so while the interpreter finalizes. At exit (an `atexit`
//! hook, which runs before finalization) `print_output_raw` switches to the raw descriptors and
//! waits for a batch being written through Python to finish.

use pyo3::prelude::*;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Set at exit: from then on output goes straight to the descriptors.
static RAW: AtomicBool = AtomicBool::new(false);
/// Batches being written through Python now (the exit hook waits for them).
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// One of `sys.stdout` / `sys.stderr`: the printer's lines are kept until its flush, so a batch
/// of lines costs one attach.
struct PythonStream {
    name: &'static str,
    pending: Vec<u8>,
}

impl Write for PythonStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        IN_PYTHON.fetch_add(1, Ordering::SeqCst);
        let through_python = !RAW.load(Ordering::SeqCst)
            && Python::try_attach(|py| write_through_python(py, self.name, &text).is_ok()).unwrap_or(false);
        IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
        if !through_python {
            // At exit, or with no usable `sys.stdout` (None under pythonw, closed): the descriptor.
            if self.name == "stderr" {
                std::io::stderr().write_all(text.as_bytes())?;
            } else {
                let mut out = std::io::stdout();
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
        }
        Ok(())
    }
}

fn write_through_python(py: Python<'_>, name: &str, text: &str) -> PyResult<()> {
    let stream = py.import("sys")?.getattr(name)?;
    if stream.is_none() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("sys.{name} is None")));
    }
    stream.call_method1("write", (text,))?;
    stream.call_method0("flush")?;
    Ok(())
}

/// Makes the runtime print worker output through `sys.stdout` / `sys.stderr` (module import).
pub(crate) fn install() {
    oxray_runtime::agent::set_output_sinks(
        Box::new(PythonStream { name: "stdout", pending: Vec::new() }),
        Box::new(PythonStream { name: "stderr", pending: Vec::new() }),
    );
}

/// At interpreter exit: worker output goes to the raw descriptors from now on, once a batch being
/// written through Python (it needs the interpreter, which this call lets go of) is done.
#[pyfunction]
pub(crate) fn print_output_raw(py: Python<'_>) {
    RAW.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = Instant::now() + Duration::from_secs(2);
        while IN_PYTHON.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
