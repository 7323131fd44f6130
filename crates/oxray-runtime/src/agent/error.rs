//! What the node agent refuses, and the one place each refusal becomes a gRPC status.

use crate::ids::{ActorId, ClientId, IdError, ObjectId, PlacementGroupId, WorkerId};
use crate::resources::{ResourceError, ResourceSet};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    BadId(#[from] IdError),
    #[error("invalid resource request: {0}")]
    BadResources(#[from] ResourceError),
    /// A request missing a part it must have (a spec, a hello, an object).
    #[error("{0}")]
    Malformed(&'static str),
    #[error(
        "The name {name:?} (namespace={namespace:?}) is already taken by another actor. Please use a \
         different name, or get_if_exists=True to get that one"
    )]
    NameTaken { name: String, namespace: String },
    #[error("no actor {0} on this node")]
    UnknownActor(ActorId),
    #[error("worker {0} is not one this node started (or it already exited)")]
    UnknownWorker(WorkerId),
    #[error("function {0} is not registered: register it before submitting tasks that use it")]
    UnknownFunction(String),
    #[error("object {0} was never reserved with CreateObject")]
    NotReserved(ObjectId),
    /// A put of an id already sealed here: the first copy stays (a retried streaming
    /// generator yields its delivered items again under the same ids).
    #[error("object {0} already exists")]
    AlreadySealed(ObjectId),
    #[error("cannot reserve {size} bytes in the object store: {source}")]
    StoreFull { size: usize, source: std::io::Error },
    #[error("node {node} has {available} available, not {wanted}")]
    BundlesDoNotFit { node: String, available: ResourceSet, wanted: ResourceSet },
    /// A commit for a group this node never reserved, or has given back since.
    #[error("placement group {0} has no bundles reserved on this node: the head reserves them before it commits")]
    BundlesNotReserved(PlacementGroupId),
    #[error("this node has no head: placement groups and named actors need `oxray start --head` or `oxray.init()`")]
    NoHead,
    #[error("driver {0} already opened its session, or its session ended: a driver joins again with oxray.init()")]
    DriverSessionUsed(ClientId),
    #[error(
        "the session of driver {0} has ended (it shut down, or was silent for longer than its lease, \
         OXRAY_DRIVER_LEASE_S) and its work was cleaned up: call oxray.shutdown() and oxray.init() to join again"
    )]
    DriverEnded(ClientId),
}

impl From<AgentError> for tonic::Status {
    fn from(e: AgentError) -> Self {
        let message = e.to_string();
        match e {
            AgentError::BadId(_) | AgentError::BadResources(_) | AgentError::Malformed(_) => {
                tonic::Status::invalid_argument(message)
            }
            AgentError::NameTaken { .. } | AgentError::AlreadySealed(_) => tonic::Status::already_exists(message),
            AgentError::UnknownActor(_) | AgentError::UnknownWorker(_) | AgentError::UnknownFunction(_) => {
                tonic::Status::not_found(message)
            }
            AgentError::NotReserved(_)
            | AgentError::BundlesDoNotFit { .. }
            | AgentError::BundlesNotReserved(_)
            | AgentError::DriverSessionUsed(_)
            | AgentError::DriverEnded(_) => tonic::Status::failed_precondition(message),
            AgentError::StoreFull { .. } => tonic::Status::resource_exhausted(message),
            AgentError::NoHead => tonic::Status::unavailable(message),
        }
    }
}

/// Why an object could not be copied here from another node. Its text becomes
/// the object's `ObjectLostError`.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("Object {id} could not be copied from the node at {address}: {reason}")]
    Failed { id: ObjectId, address: String, reason: String },
    /// The other node no longer has it, in that node's words.
    #[error("{0}")]
    Missing(String),
}
