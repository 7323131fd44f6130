//! The cluster's drivers as the Jobs API shows them: a submission's driver
//! fills in the submission's row (`job_id`, `driver_info`, `driver_node_id`);
//! a driver started by hand (`init()` in a script) is a row of type DRIVER.

use oxray_rest::{DriverInfo, JobDetails, JobStatus, JobType};

/// One driver (one job) of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct DriverRow {
    /// Ray's JobID: 8 hex digits.
    pub job_id: String,
    pub node_id: String,
    pub node_ip: String,
    pub pid: u32,
    /// Its command line.
    pub entrypoint: String,
    /// The submission that started it; None for a driver started by hand.
    pub submission_id: Option<String>,
    /// Milliseconds since the epoch.
    pub start_time: u64,
    /// None while it runs.
    pub end_time: Option<u64>,
}

/// Where the drivers come from: the head's table, which the runtime owns.
pub trait DriverTable: Send + Sync + std::fmt::Debug {
    fn drivers(&self) -> Vec<DriverRow>;
}

impl DriverRow {
    /// Ray's `driver_info`.
    pub fn info(&self) -> DriverInfo {
        DriverInfo { id: self.job_id.clone(), node_ip_address: self.node_ip.clone(), pid: self.pid.to_string() }
    }

    /// Fills in a submission's `JobDetails` from its driver.
    pub fn link(&self, details: &mut JobDetails) {
        details.job_id = Some(self.job_id.clone());
        details.driver_info = Some(self.info());
        details.driver_node_id = Some(self.node_id.clone());
    }

    /// A DRIVER row, as Ray's head lists one (RUNNING, then SUCCEEDED once it
    /// ended; a running one shows `end_time` 0).
    pub fn details(&self) -> JobDetails {
        JobDetails {
            job_type: JobType::Driver,
            job_id: Some(self.job_id.clone()),
            submission_id: None,
            driver_info: Some(self.info()),
            status: if self.end_time.is_some() { JobStatus::Succeeded } else { JobStatus::Running },
            entrypoint: self.entrypoint.clone(),
            message: String::new(),
            error_type: None,
            start_time: self.start_time,
            end_time: Some(self.end_time.unwrap_or(0)),
            metadata: Default::default(),
            runtime_env: Default::default(),
            driver_agent_http_address: None,
            driver_node_id: Some(self.node_id.clone()),
            driver_exit_code: None,
        }
    }
}
