//! The cluster's drivers (jobs), as their agents report them (`UpdateDriver`):
//! kept in memory, running ones and the last `History` ended ones.

use super::{Head, History};
use crate::clock;
use oxray_proto::DriverRecord;
use std::collections::{HashMap, VecDeque};

#[derive(Default)]
pub(super) struct DriverTable {
    by_job: HashMap<Vec<u8>, DriverRecord>,
    /// Ended drivers, oldest first.
    ended: VecDeque<Vec<u8>>,
}

impl DriverTable {
    /// Records a driver's start or end (`end_time_ms` set); the ended ones beyond
    /// the last `keep` are forgotten.
    pub(super) fn update(&mut self, driver: DriverRecord, keep: History) {
        let job = driver.job_id.clone();
        let ended = driver.end_time_ms != 0;
        self.by_job.insert(job.clone(), driver);
        if ended && !self.ended.contains(&job) {
            self.ended.push_back(job);
            while self.ended.len() > keep.0 {
                if let Some(old) = self.ended.pop_front() {
                    self.by_job.remove(&old);
                }
            }
        }
    }

    pub(super) fn all(&self) -> Vec<DriverRecord> {
        self.by_job.values().cloned().collect()
    }
}

impl Head {
    /// Every driver the head knows of, running ones with `end_time_ms` 0. A
    /// driver whose node is dead counts as ended.
    pub fn drivers(&self) -> Vec<DriverRecord> {
        let alive = self.nodes.lock().alive_ids();
        let mut out = self.drivers.lock().all();
        for driver in &mut out {
            if driver.end_time_ms == 0 && !alive.contains(&driver.node_id) {
                driver.end_time_ms = clock::now_ms();
            }
        }
        out.sort_by_key(|d| d.start_time_ms);
        out
    }
}
