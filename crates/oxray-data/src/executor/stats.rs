//! What each operator did (rows, bytes, blocks, tasks, CPU and wall time), for
//! `Dataset.stats()` and the progress display.

use std::time::Instant;

/// What one operator did, for `stats()` and progress.
#[derive(Clone, Debug, Default)]
pub struct OpStats {
    pub name: String,
    pub started: Option<Instant>,
    pub finished: Option<Instant>,
    pub cpu_s: f64,
    pub task_wall_s: f64,
    pub rows: u64,
    pub bytes: u64,
    pub blocks: u64,
    pub tasks: u64,
    pub in_flight: u64,
}

impl OpStats {
    pub(super) fn start(&mut self) {
        self.started.get_or_insert_with(Instant::now);
    }

    pub(super) fn output(&mut self, rows: u64, bytes: u64, blocks: u64) {
        self.rows += rows;
        self.bytes += bytes;
        self.blocks += blocks;
        self.finished = Some(Instant::now());
    }

    pub fn wall_s(&self) -> f64 {
        match self.started {
            None => 0.0,
            Some(start) => self.finished.unwrap_or_else(Instant::now).duration_since(start).as_secs_f64(),
        }
    }
}
