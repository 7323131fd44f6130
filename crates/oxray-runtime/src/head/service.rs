//! The head's gRPC service (`HeadService`): each handler decodes and checks its
//! request, calls the part it concerns, and shapes the reply.

use super::groups::check_spec;
use super::{Head, HeadError};
use crate::ids::{ActorId, PlacementGroupId};
use oxray_proto::head_service_server::HeadService;
use oxray_proto::{
    ActorInfo, ActorRequest, ClusterInfoReply, DatasetUpdate, DriverRecord, Empty, ExperimentUpdate,
    GetNamedActorReply, GetNamedActorRequest, HeartbeatRequest, ListActorsReply, ListPlacementGroupsReply,
    PlacementGroupInfo, PlacementGroupReply, PlacementGroupRequest, PlacementGroupSpec, RegisterActorReply,
    RegisterActorRequest, RegisterNodeRequest, ServeCheckpoint, ServeUpdate, TrainRunUpdate,
};
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl HeadService for Head {
    #[tracing::instrument(skip_all, fields(node = ?request.get_ref().node.as_ref().map(|n| hex::encode(&n.node_id))))]
    async fn register_node(&self, request: Request<RegisterNodeRequest>) -> Result<Response<Empty>, Status> {
        let info = request.into_inner().node.ok_or(HeadError::Malformed("RegisterNode needs a node"))?;
        self.add_node(info)?;
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(level = "trace", skip_all, fields(node = %hex::encode(&request.get_ref().node_id)))]
    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<ClusterInfoReply>, Status> {
        let nodes = self.record_beat(request.into_inner())?;
        Ok(Response::new(ClusterInfoReply { nodes, agent_tables: None }))
    }

    async fn list_nodes(&self, _request: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        Ok(Response::new(ClusterInfoReply { nodes: self.nodes(), agent_tables: None }))
    }

    #[tracing::instrument(skip_all, fields(actor = ?request.get_ref().actor.as_ref().map(|a| (hex::encode(&a.actor_id), &a.name))))]
    async fn register_actor(
        &self,
        request: Request<RegisterActorRequest>,
    ) -> Result<Response<RegisterActorReply>, Status> {
        let req = request.into_inner();
        let actor = req.actor.ok_or(HeadError::Malformed("RegisterActor needs an actor"))?;
        let actor_id = ActorId::from_bytes(&actor.actor_id).map_err(HeadError::from)?;
        let reply = match self.add_actor(actor_id, actor, req.get_if_exists).await? {
            Some(existing) => RegisterActorReply { actor_id: existing.to_vec(), existing: true },
            None => RegisterActorReply { actor_id: actor_id.to_vec(), existing: false },
        };
        Ok(Response::new(reply))
    }

    #[tracing::instrument(skip_all, fields(actor = %hex::encode(&request.get_ref().actor_id), state = request.get_ref().state))]
    async fn update_actor(&self, request: Request<ActorInfo>) -> Result<Response<Empty>, Status> {
        let info = request.into_inner();
        let actor_id = ActorId::from_bytes(&info.actor_id).map_err(HeadError::from)?;
        self.record_actor(actor_id, info).await?;
        Ok(Response::new(Empty {}))
    }

    async fn get_named_actor(
        &self,
        request: Request<GetNamedActorRequest>,
    ) -> Result<Response<GetNamedActorReply>, Status> {
        let req = request.into_inner();
        let actor = self.actors.lock().named(req.namespace, req.name);
        Ok(Response::new(GetNamedActorReply { found: actor.is_some(), actor }))
    }

    async fn get_actor(&self, request: Request<ActorRequest>) -> Result<Response<GetNamedActorReply>, Status> {
        let id = ActorId::from_bytes(&request.into_inner().actor_id).map_err(HeadError::from)?;
        let actor = self.actors.lock().get(&id);
        Ok(Response::new(GetNamedActorReply { found: actor.is_some(), actor }))
    }

    async fn list_actors(&self, _request: Request<Empty>) -> Result<Response<ListActorsReply>, Status> {
        Ok(Response::new(ListActorsReply { actors: self.actors() }))
    }

    #[tracing::instrument(skip_all, fields(group = %hex::encode(&request.get_ref().pg_id), bundles = request.get_ref().bundles.len()))]
    async fn create_placement_group(
        &self,
        request: Request<PlacementGroupSpec>,
    ) -> Result<Response<PlacementGroupInfo>, Status> {
        let spec = request.into_inner();
        let pg_id = check_spec(&spec)?;
        Ok(Response::new(self.add_group(pg_id, spec).await))
    }

    #[tracing::instrument(skip_all, fields(group = %hex::encode(&request.get_ref().pg_id)))]
    async fn remove_placement_group(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let pg_id = PlacementGroupId::from_bytes(&request.into_inner().pg_id).map_err(HeadError::from)?;
        self.withdraw_group(pg_id).await?;
        Ok(Response::new(Empty {}))
    }

    async fn get_placement_group(
        &self,
        request: Request<PlacementGroupRequest>,
    ) -> Result<Response<PlacementGroupReply>, Status> {
        let req = request.into_inner();
        let found = if req.pg_id.is_empty() {
            self.groups.lock().named(&req.name, &req.namespace)
        } else {
            let pg_id = PlacementGroupId::from_bytes(&req.pg_id).map_err(HeadError::from)?;
            self.groups.lock().get(&pg_id)
        };
        Ok(Response::new(PlacementGroupReply { found: found.is_some(), info: found }))
    }

    async fn list_placement_groups(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<ListPlacementGroupsReply>, Status> {
        Ok(Response::new(ListPlacementGroupsReply { groups: self.placement_groups() }))
    }

    async fn update_train_run(&self, request: Request<TrainRunUpdate>) -> Result<Response<Empty>, Status> {
        let update = request.into_inner();
        self.train_runs
            .update(&update.run_id, &update.run_json, &update.new_reports_json)
            .await
            .map_err(Status::invalid_argument)?;
        Ok(Response::new(Empty {}))
    }

    async fn update_experiment(&self, request: Request<ExperimentUpdate>) -> Result<Response<Empty>, Status> {
        let update = request.into_inner();
        self.experiments
            .update(&update.experiment_id, &update.experiment_json, &update.new_results_json)
            .await
            .map_err(Status::invalid_argument)?;
        Ok(Response::new(Empty {}))
    }

    async fn update_serve(&self, request: Request<ServeUpdate>) -> Result<Response<Empty>, Status> {
        self.serve().record_details(&request.into_inner().details_json).map_err(Status::invalid_argument)?;
        Ok(Response::new(Empty {}))
    }

    async fn save_serve_checkpoint(&self, request: Request<ServeCheckpoint>) -> Result<Response<Empty>, Status> {
        self.serve().save_checkpoint(request.into_inner().checkpoint).await.map_err(HeadError::from)?;
        Ok(Response::new(Empty {}))
    }

    async fn get_serve_checkpoint(&self, _: Request<Empty>) -> Result<Response<ServeCheckpoint>, Status> {
        let checkpoint = self.serve().checkpoint().map(|c| c.as_ref().clone()).unwrap_or_default();
        Ok(Response::new(ServeCheckpoint { checkpoint }))
    }

    async fn update_dataset(&self, request: Request<DatasetUpdate>) -> Result<Response<Empty>, Status> {
        let update = request.into_inner();
        self.datasets.update(&update.dataset_id, &update.dataset_json).map_err(Status::invalid_argument)?;
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(skip_all, fields(job = %hex::encode(&request.get_ref().job_id), ended = request.get_ref().end_time_ms != 0))]
    async fn update_driver(&self, request: Request<DriverRecord>) -> Result<Response<Empty>, Status> {
        let driver = request.into_inner();
        if driver.job_id.len() != 4 {
            return Err(HeadError::Malformed("UpdateDriver needs a 4-byte job id").into());
        }
        self.drivers.lock().update(driver, self.history);
        Ok(Response::new(Empty {}))
    }
}
