//! The head service: the cluster's node table, fed by registrations and heartbeats.

use oxray_proto::head_server::Head;
use oxray_proto::{ClusterInfoReply, Empty, HeartbeatRequest, NodeInfo, RegisterNodeRequest};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// A node that has not sent a heartbeat for this long is reported dead.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(10);

struct NodeRecord {
    info: NodeInfo,
    last_seen: Instant,
}

#[derive(Clone, Default)]
pub struct HeadService {
    nodes: Arc<Mutex<HashMap<Vec<u8>, NodeRecord>>>,
}

impl HeadService {
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let nodes = self.nodes.lock();
        let mut out: Vec<NodeInfo> = nodes
            .values()
            .map(|r| {
                let mut info = r.info.clone();
                info.alive = r.last_seen.elapsed() < NODE_TIMEOUT;
                info
            })
            .collect();
        out.sort_by_key(|n| (!n.is_head, n.start_time_ms));
        out
    }
}

#[tonic::async_trait]
impl Head for HeadService {
    async fn register_node(&self, request: Request<RegisterNodeRequest>) -> Result<Response<Empty>, Status> {
        let info = request.into_inner().node.ok_or_else(|| Status::invalid_argument("missing node"))?;
        if info.node_id.len() != 16 {
            return Err(Status::invalid_argument("node_id must be 16 bytes"));
        }
        self.nodes.lock().insert(info.node_id.clone(), NodeRecord { info, last_seen: Instant::now() });
        Ok(Response::new(Empty {}))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<Empty>, Status> {
        let beat = request.into_inner();
        let mut nodes = self.nodes.lock();
        let record = nodes
            .get_mut(&beat.node_id)
            .ok_or_else(|| Status::not_found("unknown node: register before sending heartbeats"))?;
        record.info.available = beat.available;
        record.last_seen = Instant::now();
        Ok(Response::new(Empty {}))
    }

    async fn list_nodes(&self, _request: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        Ok(Response::new(ClusterInfoReply { nodes: self.nodes() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn heartbeats_update_and_unknown_nodes_are_refused() {
        let head = HeadService::default();
        let beat = HeartbeatRequest { node_id: vec![1; 16], available: HashMap::new() };
        assert_eq!(head.heartbeat(Request::new(beat.clone())).await.unwrap_err().code(), tonic::Code::NotFound);
        let info = NodeInfo { node_id: vec![1; 16], is_head: true, ..Default::default() };
        head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
        let mut beat = beat;
        beat.available.insert("CPU".into(), 1.5);
        head.heartbeat(Request::new(beat)).await.unwrap();
        let nodes = head.nodes();
        assert_eq!(nodes.len(), 1);
        assert!(nodes[0].alive);
        assert_eq!(nodes[0].available["CPU"], 1.5);
    }
}
