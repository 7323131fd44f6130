//! `oxray._native`: the Python binding of the oxray engine. It starts the
//! embedded cluster, and gives each Python process a client for its node
//! agent plus zero-copy access to objects in shared memory.

mod buffers;
mod client;
mod cluster;
mod data;
mod data_exec;
mod error;
mod labels;
mod metrics;
mod output;
mod proctitle;
mod records;
mod serve;
mod storage;
mod tune;

use pyo3::prelude::*;
use std::sync::OnceLock;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// Async threads for this process: 2 in a driver (it hosts the embedded
/// cluster). Workers are started with `OXRAY_RUNTIME_THREADS=0`: no runtime
/// threads, the calling Python threads drive the runtime themselves, which saves
/// a thread hand-off per message (measured faster on small machines).
fn runtime_threads() -> usize {
    std::env::var("OXRAY_RUNTIME_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

/// The process-wide async runtime that runs RPCs and, in a driver, the embedded cluster.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME.get_or_init(|| {
        let mut builder = match runtime_threads() {
            0 => tokio::runtime::Builder::new_current_thread(),
            n => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n).thread_name("oxray-rt");
                b
            }
        };
        builder.enable_all().build().expect("cannot start the oxray async runtime")
    })
}

pub(crate) use error::{OxrayAuthError, OxrayRpcError};

/// What `oxray` logs when `OXRAY_LOG` is unset: the engine's notices (spills,
/// retries, restarts) and every other crate's warnings.
const DEFAULT_LOG_FILTER: &str = "warn,oxray_runtime=info,oxray_object_store=info,oxray_io=info,_native=info";

/// Sends the engine's `tracing` events to stderr, filtered by `OXRAY_LOG`
/// (an `EnvFilter` directive such as `debug` or `oxray_runtime::agent=trace`).
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("OXRAY_LOG") {
        Ok(directives) => EnvFilter::try_new(&directives).unwrap_or_else(|e| {
            // Logging is not up yet: this is the one message that must go straight to stderr.
            #[allow(clippy::print_stderr, reason = "the log subscriber is not installed yet")]
            {
                eprintln!("oxray: ignoring OXRAY_LOG={directives:?} ({e}); using {DEFAULT_LOG_FILTER:?}");
            }
            EnvFilter::new(DEFAULT_LOG_FILTER)
        }),
        Err(_) => EnvFilter::new(DEFAULT_LOG_FILTER),
    };
    // A host process that installed its own subscriber keeps it.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    output::install();
    m.add_function(wrap_pyfunction!(output::print_output_raw, m)?)?;
    m.add_class::<buffers::ObjectBuffer>()?;
    m.add_class::<buffers::PreparedObject>()?;
    m.add_class::<client::Client>()?;
    m.add_class::<cluster::Cluster>()?;
    m.add_class::<storage::Storage>()?;
    m.add_class::<records::TaskKind>()?;
    m.add_class::<records::ActorInfo>()?;
    m.add_class::<records::NodeInfo>()?;
    m.add_class::<records::PlacementGroupInfo>()?;
    m.add_class::<records::CreatedActor>()?;
    m.add_class::<records::Assignment>()?;
    m.add_class::<records::StoreStats>()?;
    m.add_function(wrap_pyfunction!(cluster::start_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(buffers::encode_object, m)?)?;
    m.add_function(wrap_pyfunction!(proctitle::set_process_title, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::record_metric, m)?)?;
    m.add_function(wrap_pyfunction!(labels::check_label_selector, m)?)?;
    m.add_function(wrap_pyfunction!(labels::label_selector_matches, m)?)?;
    m.add_function(wrap_pyfunction!(client::is_placement_group_resource, m)?)?;
    data::register(m)?;
    data_exec::register(m)?;
    tune::register(m)?;
    serve::register(m)?;
    m.add("INLINE_THRESHOLD", oxray_object_store::INLINE_THRESHOLD)?;
    m.add("OxrayRpcError", m.py().get_type::<OxrayRpcError>())?;
    m.add("OxrayAuthError", m.py().get_type::<OxrayAuthError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
