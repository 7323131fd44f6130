//! The oxray engine: the head service, the node agent with its scheduler and
//! worker pool, and the client that drivers and workers use.

pub mod agent;
pub mod auth;
pub mod client;
pub mod cluster;
pub mod cluster_state;
pub mod datasets;
pub mod errors;
pub mod head;
pub mod head_store;
pub mod ids;
pub mod job_resources;
pub mod labels;
pub mod placement;
pub mod refs;
pub mod resources;
pub mod tls;
pub mod train_runs;

pub use oxray_proto as proto;
