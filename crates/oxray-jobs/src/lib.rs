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
pub use packages::PackageError;
pub use record::SubmitError;
pub use remote::{RemoteError, RemoteEvent, RemoteJobs, RemoteRun};
pub use resources::{BoxFuture, EntrypointResources, HeldOn, HoldError};
pub use runtime_env::RuntimeEnvError;
pub use store::StoreError;
