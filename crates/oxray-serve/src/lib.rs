//! oxray Serve's engine. The controller ([`controller`]) keeps every
//! application, its deployments and their replicas, and decides what to start,
//! reconfigure, health-check, stop and kill: rolling updates on a redeploy (new
//! replicas ready before old ones go), replacements after crashes and failed
//! health checks, and the autoscaling policy's targets ([`autoscaling`]). It does
//! no I/O and reads no clock: the runtime reports what happened, passing the
//! time, and carries out the [`Action`]s it returns. Statuses follow Ray Serve
//! 2.60's model ([`status`]). The HTTP proxies route by the [`routes`] table the
//! controller builds.

pub mod autoscaling;
pub mod config;
pub mod controller;
mod deployment;
pub mod error;
pub mod routes;
pub mod status;

pub use config::{Aggregation, AutoscalingConfig, DeploymentSpec, Replicas};
pub use controller::{Action, AdoptedReplica, AppStatusReport, Controller, DeploymentStatusReport};
pub use error::ServeError;
pub use status::{ApplicationStatus, DeploymentStatus, DeploymentStatusTrigger, ReplicaState};
