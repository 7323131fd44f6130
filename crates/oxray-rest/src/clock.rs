//! The epoch-millisecond clock Ray's REST records are stamped with (`JobDetails`'
//! `start_time`/`end_time`, the cluster status' `time`), and the one wall clock of
//! the engine: the jobs engine, the HTTP server and the runtime all read this one.

/// Milliseconds since the epoch (0 for a clock before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
