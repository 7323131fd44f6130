//! oxray Tune's engine. The trial controller ([`controller`]) keeps every
//! trial's state, the resources trials hold, retries after failures and the
//! schedulers' decisions ([`scheduler`]); it does no I/O. The Python driver
//! loop (`oxray/tune/_internal/runner.py`) tells it what happened (a trial was
//! added, reported, ended, failed) and carries out the actions it returns
//! (start a trial's actor, stop one).

pub mod controller;
pub mod error;
pub mod hyperband;
pub mod pbt;
pub mod resources;
pub mod scheduler;

pub use controller::{Action, Config, Controller, Decision, TrialStatus};
pub use error::TuneError;
pub use hyperband::HyperBandSpec;
pub use pbt::{PbtSpec, PbtVerdict};
pub use resources::Resources;
pub use scheduler::{AshaSpec, MedianSpec, SchedulerSpec};
