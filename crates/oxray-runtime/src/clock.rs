//! The crate's one wall clock: milliseconds since the epoch, read by the
//! service layers and handed to the state machines, which never read it themselves.

/// Milliseconds since the epoch (0 for a clock before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
