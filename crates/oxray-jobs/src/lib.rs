//! Ray's Jobs engine, without HTTP: a submitted entrypoint runs and is
//! supervised in its own process group (`entrypoint.rs`), in a prepared
//! runtime_env (`runtime_env.rs`: pip virtualenvs, py_modules, working_dir
//! packages from `packages.rs`), its record kept in redb (`store.rs`,
//! `record.rs`), all driven by the [`JobManager`] (`manager.rs`).
//!
//! The runtime plugs in through ports (`resources.rs`: entrypoint resources;
//! `drivers.rs`: the cluster's drivers; `remote.rs`: jobs placed on other
//! nodes). `oxray-http` serves the manager over Ray's REST routes; the node
//! agent runs entrypoints placed on its node with the same supervision.

pub mod drivers;
pub mod entrypoint;
pub mod logs;
mod manager;
pub mod packages;
pub mod record;
pub mod remote;
pub mod resources;
pub mod runtime_env;
mod store;

pub use drivers::{DriverRow, DriverTable};
pub use manager::{JobError, JobManager, JobsConfig};
pub use remote::{RemoteEvent, RemoteJobs, RemoteRun};
pub use resources::{BoxFuture, EntrypointResources, HeldOn, HoldError};

/// Milliseconds since the epoch (0 for a clock before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
