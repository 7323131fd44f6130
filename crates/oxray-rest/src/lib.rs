//! The bodies of the head's REST API that more than one crate reads, as serde
//! types: the server writes them (`oxray-http`, from `oxray-jobs` and the
//! runtime's head) and its clients read them (the dashboard's pages, the
//! Kubernetes operator), so a field renamed on one side fails to compile on the
//! other instead of reading as empty. The field names are Ray 2.60's.

pub mod clock;
pub mod cluster_status;
pub mod jobs;

pub use clock::now_ms;
pub use cluster_status::{ClusterStatusReply, LoadMetricsReport, NodeLoad, PlacementGroupDemand};
pub use jobs::{DriverInfo, JobDetails, JobStatus, JobType};
