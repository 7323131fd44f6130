//! Which process is which: a pid with its start time names one process even once
//! the pid is reused, so the owner recorded on an arena or a spill directory (and a
//! job's process group) is never mistaken for a later process.

/// A process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and ')': fields after it follow the last ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}
