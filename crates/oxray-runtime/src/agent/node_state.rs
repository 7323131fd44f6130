//! What the head's State API asks this node's agent (`NodeStateService`): its
//! tasks, live and recently ended (`state::task_history`), and its session's
//! log files (`node_logs`).

use super::service::AgentService;
use super::{node_logs, profile};
use oxray_proto::node_state_service_server::NodeStateService;
use oxray_proto::{
    ListLogsReply, ListLogsRequest, ListTasksReply, ListTasksRequest, LogFile, LogMatch, ProfileKind, ProfileReply,
    ProfileRequest, ReadLogReply, ReadLogRequest, ServeCountersReply,
};
use std::path::PathBuf;
use tonic::{Request, Response, Status};

impl AgentService {
    fn python(&self) -> Result<String, Status> {
        let spawn = self.shared.spawn.lock();
        spawn.as_ref().map(|s| s.python.clone()).ok_or_else(|| Status::unavailable("the node is not started yet"))
    }

    fn session_dir(&self) -> Result<PathBuf, Status> {
        let spawn = self.shared.spawn.lock();
        spawn.as_ref().map(|s| s.session_dir.clone()).ok_or_else(|| Status::unavailable("the node is not started yet"))
    }
}

#[tonic::async_trait]
impl NodeStateService for AgentService {
    async fn serve_counters(&self, _: Request<oxray_proto::Empty>) -> Result<Response<ServeCountersReply>, Status> {
        let counters = self.shared.serve_proxy_counters();
        Ok(Response::new(ServeCountersReply { counters_json: counters.to_string() }))
    }

    async fn list_tasks(&self, request: Request<ListTasksRequest>) -> Result<Response<ListTasksReply>, Status> {
        let limit = request.into_inner().limit as usize;
        let (tasks, total) = self.shared.state.lock().list_tasks(limit);
        Ok(Response::new(ListTasksReply { tasks, total: total as u64 }))
    }

    async fn list_logs(&self, _request: Request<ListLogsRequest>) -> Result<Response<ListLogsReply>, Status> {
        let session = self.session_dir()?;
        let files = tokio::task::spawn_blocking(move || node_logs::list(&session))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .into_iter()
            .map(|(name, size, modified_ms)| LogFile { name, size, modified_ms })
            .collect();
        Ok(Response::new(ListLogsReply { files }))
    }

    async fn read_log(&self, request: Request<ReadLogRequest>) -> Result<Response<ReadLogReply>, Status> {
        let req = request.into_inner();
        let session = self.session_dir()?;
        let reply = tokio::task::spawn_blocking(move || -> Result<ReadLogReply, node_logs::LogError> {
            if req.search.is_empty() {
                let (data, offset, size) = node_logs::read(&session, &req.name, req.offset, req.length)?;
                Ok(ReadLogReply { data, offset, size, ..Default::default() })
            } else {
                let (found, truncated) = node_logs::search(&session, &req.name, &req.search, req.max_matches)?;
                let matches = found.into_iter().map(|(line, text)| LogMatch { line, text }).collect();
                Ok(ReadLogReply { matches, truncated, ..Default::default() })
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(reply))
    }

    async fn profile_worker(&self, request: Request<ProfileRequest>) -> Result<Response<ProfileReply>, Status> {
        let req = request.into_inner();
        if !self.shared.state.lock().is_worker_pid(req.pid) {
            return Err(profile::ProfileError::NotAWorker(req.pid).into());
        }
        let python = self.python()?;
        let output = match req.kind() {
            ProfileKind::Dump => profile::dump(&python, req.pid).await?,
            ProfileKind::Flamegraph => profile::flamegraph(&python, req.pid, req.duration_s).await?,
            ProfileKind::Unspecified => {
                return Err(Status::invalid_argument("a profile needs a kind: dump or flamegraph"));
            }
        };
        Ok(Response::new(ProfileReply { output }))
    }
}
