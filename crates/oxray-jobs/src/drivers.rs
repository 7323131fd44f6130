//! The cluster's drivers as the Jobs API shows them: a submission's driver
//! fills in the submission's row (`job_id`, `driver_info`, `driver_node_id`);
//! a driver started by hand (`init()` in a script) is a row of type DRIVER.

use serde_json::{Value, json};

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
    pub fn info(&self) -> Value {
        json!({"id": self.job_id, "node_ip_address": self.node_ip, "pid": self.pid.to_string()})
    }

    /// Fills in a submission's `JobDetails` from its driver.
    pub fn link(&self, details: &mut Value) {
        details["job_id"] = json!(self.job_id);
        details["driver_info"] = self.info();
        details["driver_node_id"] = json!(self.node_id);
    }

    /// A DRIVER row, as Ray's head lists one (RUNNING, then SUCCEEDED once it
    /// ended; a running one shows `end_time` 0).
    pub fn details(&self) -> Value {
        json!({
            "type": "DRIVER",
            "job_id": self.job_id,
            "submission_id": null,
            "driver_info": self.info(),
            "status": if self.end_time.is_some() { "SUCCEEDED" } else { "RUNNING" },
            "entrypoint": self.entrypoint,
            "message": "",
            "error_type": null,
            "start_time": self.start_time,
            "end_time": self.end_time.unwrap_or(0),
            "metadata": {},
            "runtime_env": {},
            "driver_agent_http_address": null,
            "driver_node_id": self.node_id,
            "driver_exit_code": null,
        })
    }
}
