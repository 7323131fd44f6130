//! Ray's `JobDetails`: one row of `GET /api/jobs/` and the body of
//! `GET /api/jobs/{id}`, for a submission or a driver started by hand.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A job's status, as Ray spells it on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    Pending,
    Running,
    Stopped,
    Succeeded,
    Failed,
}

impl JobStatus {
    /// Every status, in the order a job can reach them.
    pub const ALL: [JobStatus; 5] =
        [JobStatus::Pending, JobStatus::Running, JobStatus::Stopped, JobStatus::Succeeded, JobStatus::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Stopped => "STOPPED",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
        }
    }

    /// The status named `text` (Ray's spelling), if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// STOPPED, SUCCEEDED and FAILED never change afterwards.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Stopped | JobStatus::Succeeded | JobStatus::Failed)
    }
}

/// Whether a row is a Jobs API submission or a driver started by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobType {
    Submission,
    Driver,
}

/// Ray's `driver_info`: the driver process of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverInfo {
    /// The driver's JobID (8 hex digits).
    pub id: String,
    pub node_ip_address: String,
    /// The process id, as a string (Ray's spelling).
    pub pid: String,
}

/// Ray's `JobDetails`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobDetails {
    #[serde(rename = "type")]
    pub job_type: JobType,
    /// The driver's JobID, once a driver runs.
    pub job_id: Option<String>,
    pub submission_id: Option<String>,
    pub driver_info: Option<DriverInfo>,
    pub status: JobStatus,
    pub entrypoint: String,
    pub message: String,
    pub error_type: Option<String>,
    /// Milliseconds since the epoch.
    pub start_time: u64,
    /// Milliseconds since the epoch; a running driver row shows 0, as Ray's does.
    pub end_time: Option<u64>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub runtime_env: Map<String, Value>,
    pub driver_agent_http_address: Option<String>,
    pub driver_node_id: Option<String>,
    pub driver_exit_code: Option<i32>,
}

impl JobDetails {
    /// The id a row is known by: its submission id, else its driver's JobID.
    pub fn id(&self) -> &str {
        self.submission_id.as_deref().or(self.job_id.as_deref()).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ray_spells_the_fields_and_statuses() {
        let details = JobDetails {
            job_type: JobType::Submission,
            job_id: None,
            submission_id: Some("raysubmit_1".into()),
            driver_info: None,
            status: JobStatus::Succeeded,
            entrypoint: "python x.py".into(),
            message: "Job finished successfully.".into(),
            error_type: None,
            start_time: 1,
            end_time: Some(2),
            metadata: Map::new(),
            runtime_env: Map::new(),
            driver_agent_http_address: None,
            driver_node_id: None,
            driver_exit_code: Some(0),
        };
        let value = serde_json::to_value(&details).unwrap();
        assert_eq!(value["type"], "SUBMISSION");
        assert_eq!(value["status"], "SUCCEEDED");
        assert_eq!(value["job_id"], Value::Null);
        let back: JobDetails = serde_json::from_value(value).unwrap();
        assert_eq!(back, details);
        assert_eq!(JobStatus::parse("STOPPED"), Some(JobStatus::Stopped));
        assert_eq!(JobStatus::parse("stopped"), None);
    }
}
