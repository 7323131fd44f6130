//! Typed ids: objects, tasks, nodes, actors, workers, clients, placement groups
//! (16 random bytes each) and jobs (4 bytes, as in Ray). Each kind is its own
//! type, so `run_on(task_id, worker_id)` with the arguments swapped does not compile.
//! On the wire every id is its raw bytes; `from_bytes` checks the length.

use std::fmt;

/// Raw bytes that are not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a {expected}-byte {kind}, got {got} bytes")]
pub struct IdError {
    pub kind: &'static str,
    pub expected: usize,
    pub got: usize,
}

macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident, $len:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name([u8; $len]);

        impl $name {
            /// Bytes on the wire.
            pub const SIZE: usize = $len;

            pub fn random() -> Self {
                $name(rand::random())
            }

            pub const fn from_array(bytes: [u8; $len]) -> Self {
                $name(bytes)
            }

            /// Parses an id received from the network or from Python.
            pub fn from_bytes(raw: &[u8]) -> Result<Self, IdError> {
                raw.try_into().map($name).map_err(|_| IdError { kind: $kind, expected: $len, got: raw.len() })
            }

            pub fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }

            pub fn to_vec(self) -> Vec<u8> {
                self.0.to_vec()
            }

            pub fn hex(&self) -> String {
                hex::encode(self.0)
            }

            /// The first four bytes in hex, to name the id in messages.
            pub fn short(&self) -> String {
                hex::encode(&self.0[..4])
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.hex())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.hex())
            }
        }
    };
}

define_id!(
    /// An object in the object store (a `put`, or one return of a task).
    ObjectId, 16, "object id"
);
define_id!(
    /// One submission of a task, actor creation or actor call.
    TaskId, 16, "task id"
);
define_id!(
    /// A node agent.
    NodeId, 16, "node id"
);
define_id!(
    /// An actor, for its whole life across restarts.
    ActorId, 16, "actor id"
);
define_id!(
    /// A worker process started by a node agent.
    WorkerId, 16, "worker id"
);
define_id!(
    /// Whoever holds references on a node agent: a driver, one of its workers
    /// (by worker id), or an owner node (by node id).
    ClientId, 16, "client id"
);
define_id!(
    /// A placement group.
    PlacementGroupId, 16, "placement group id"
);
define_id!(
    /// A driver's job: its workers' output goes to it.
    JobId, 4, "job id"
);

impl From<WorkerId> for ClientId {
    fn from(worker: WorkerId) -> Self {
        ClientId(worker.0)
    }
}

impl From<NodeId> for ClientId {
    fn from(node: NodeId) -> Self {
        ClientId(node.0)
    }
}

impl ClientId {
    /// The worker this client would be, if it is one of a node's workers (a
    /// worker's client id is its worker id).
    pub fn as_worker(self) -> WorkerId {
        WorkerId(self.0)
    }
}

impl JobId {
    /// A job id from the wire, where empty bytes mean "no job" (a worker between
    /// tasks, or a subscriber that wants every job's output).
    pub fn from_optional_bytes(raw: &[u8]) -> Result<Option<Self>, IdError> {
        if raw.is_empty() { Ok(None) } else { Self::from_bytes(raw).map(Some) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_and_named() {
        let err = TaskId::from_bytes(&[1, 2, 3]).unwrap_err();
        assert_eq!(err.to_string(), "expected a 16-byte task id, got 3 bytes");
        let id = ObjectId::from_bytes(&[7; 16]).unwrap();
        assert_eq!(id.as_bytes(), &[7; 16]);
        assert_eq!(id.short(), "07070707");
        assert_eq!(format!("{id:?}"), format!("ObjectId({})", "07".repeat(16)));
        assert_eq!(JobId::from_optional_bytes(&[]).unwrap(), None);
        assert!(JobId::from_optional_bytes(&[1; 16]).is_err());
        assert_eq!(ClientId::from(WorkerId::from_array([3; 16])).as_worker(), WorkerId::from_array([3; 16]));
    }
}
