//! The oxray engine: the head service, the node agent with its scheduler and
//! worker pool, and the client that drivers and workers use.

pub mod agent;
pub mod auth;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod errors;
pub mod head;
pub mod ids;
pub mod labels;
pub mod refs;
pub mod resources;
pub mod task_env;
pub mod tls;
pub mod user_metrics;

pub use oxray_proto as proto;
