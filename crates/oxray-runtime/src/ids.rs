//! The engine's typed ids (see the `oxray-ids` crate): a newtype per kind, so a
//! swapped argument fails to compile.

pub use oxray_ids::{ActorId, ClientId, IdError, JobId, NodeId, ObjectId, PlacementGroupId, TaskId, WorkerId};

/// Parses a list of raw ids from a request.
pub fn parse_all<T>(raw: &[Vec<u8>], parse: impl Fn(&[u8]) -> Result<T, IdError>) -> Result<Vec<T>, IdError> {
    raw.iter().map(|r| parse(r)).collect()
}
