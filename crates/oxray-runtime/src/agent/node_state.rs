//! What the head's State API asks this node's agent (`NodeStateService`): its
//! tasks, live and recently ended (`state::task_history`).

use super::service::AgentService;
use oxray_proto::node_state_service_server::NodeStateService;
use oxray_proto::{ListTasksReply, ListTasksRequest};
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl NodeStateService for AgentService {
    async fn list_tasks(&self, request: Request<ListTasksRequest>) -> Result<Response<ListTasksReply>, Status> {
        let limit = request.into_inner().limit as usize;
        let (tasks, total) = self.shared.state.lock().list_tasks(limit);
        Ok(Response::new(ListTasksReply { tasks, total: total as u64 }))
    }
}
