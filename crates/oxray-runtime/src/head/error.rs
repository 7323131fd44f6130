//! What the head refuses, and the one place each refusal becomes a gRPC status.

use super::placement::StrategyError;
use super::store::StoreError;
use crate::ids::{IdError, NodeId, PlacementGroupId};
use crate::labels::LabelError;
use crate::resources::ResourceError;
use tonic::Status;

#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error(transparent)]
    BadId(#[from] IdError),
    /// A request missing a part it must have.
    #[error("{0}")]
    Malformed(&'static str),
    #[error("unknown node {0}: register before sending heartbeats")]
    UnknownNode(NodeId),
    #[error(
        "The name {name:?} (namespace={namespace:?}) is already taken by another actor. Please use a \
         different name, or get_if_exists=True to get that one"
    )]
    NameTaken { name: String, namespace: String },
    #[error("no placement group {0}")]
    UnknownPlacementGroup(PlacementGroupId),
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    #[error("a placement group needs at least one bundle")]
    NoBundles,
    #[error("bundle {index}: {source}")]
    BadBundle { index: usize, source: ResourceError },
    #[error("bundle {0} is empty: every bundle needs at least one resource greater than 0")]
    EmptyBundle(usize),
    #[error("bundle {index}: {source}")]
    BadLabelSelector { index: usize, source: LabelError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<HeadError> for Status {
    fn from(e: HeadError) -> Self {
        let message = e.to_string();
        match e {
            HeadError::BadId(_)
            | HeadError::Malformed(_)
            | HeadError::Strategy(_)
            | HeadError::NoBundles
            | HeadError::BadBundle { .. }
            | HeadError::BadLabelSelector { .. }
            | HeadError::EmptyBundle(_) => Status::invalid_argument(message),
            HeadError::UnknownNode(_) | HeadError::UnknownPlacementGroup(_) => Status::not_found(message),
            HeadError::NameTaken { .. } => Status::already_exists(message),
            HeadError::Store(_) => Status::internal(message),
        }
    }
}
