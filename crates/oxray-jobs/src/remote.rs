//! Jobs whose entrypoint resources were placed on another node: the head
//! keeps their record and log, and the node's agent runs the process
//! (`NodeJobService`, which the runtime provides behind [`RemoteJobs`]).

use crate::resources::BoxFuture;

/// What a node needs to run a job.
#[derive(Debug, Clone, Default)]
pub struct RemoteRun {
    pub submission_id: String,
    /// This run, unique per start ([`new_run_id`]): what the node knows it by.
    pub run_id: String,
    pub entrypoint: String,
    pub runtime_env_json: String,
    pub metadata_json: String,
    /// `(gcs:// URI, bytes)` of the uploads its working_dir and py_modules name.
    pub packages: Vec<(String, Vec<u8>)>,
    /// Re-attach to the job the node already runs, from this output offset.
    pub attach_from: Option<u64>,
}

/// What the node reports, in order; the channel closing before an exit
/// event means the node was lost.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteEvent {
    Started { pid: u32 },
    Output(Vec<u8>),
    SetupFailed(String),
    StartFailed(String),
    Exited(Option<i32>),
}

/// Why a node's agent could not be asked to run or stop a job; the head's log and the job's
/// message quote it.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("node id {node_id:?} is not hex")]
    BadNodeId { node_id: String },
    /// No channel to the node's agent: `reason` is the cluster's word for why (not part of
    /// it, not reachable). The runtime's channel errors are its own types, so it comes as text.
    #[error("{reason}")]
    Unreachable { reason: String },
    /// The agent answered the call with an error: its message (a gRPC status' text).
    #[error("{message}")]
    Call { message: String },
}

pub trait RemoteJobs: Send + Sync + std::fmt::Debug {
    /// Starts (or re-attaches to) a job on node `node_id` (hex).
    fn run<'a>(
        &'a self,
        node_id: &'a str,
        run: RemoteRun,
    ) -> BoxFuture<'a, Result<tokio::sync::mpsc::Receiver<RemoteEvent>, RemoteError>>;

    /// Stops run `run_id` on node `node_id`: `Ok(false)` when it runs there no more.
    fn stop<'a>(&'a self, node_id: &'a str, run_id: &'a str) -> BoxFuture<'a, Result<bool, RemoteError>>;

    /// Whether the cluster still counts node `node_id` (hex) alive: a job's stream that broke is
    /// re-attached while it does, and the job fails only once the node is declared dead.
    fn node_alive<'a>(&'a self, node_id: &'a str) -> BoxFuture<'a, bool>;
}

/// A new run id: 128 random bits in hex.
pub fn new_run_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
