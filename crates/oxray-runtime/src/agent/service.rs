//! The node agent's gRPC services, one per kind of caller: drivers (and workers
//! acting as clients), worker sessions, peer agents, and the head's bundle admin.
//! Each method decodes its request, runs it against `AgentShared`, and replies.

use super::{AgentError, AgentShared, Waited, actor_info, object_ids, timeout_deadline};
use crate::clock;
use crate::ids::{ActorId, ClientId, JobId, NodeId, ObjectId, PlacementGroupId, TaskId, WorkerId};
use oxray_proto::bundle_service_server::BundleService;
use oxray_proto::driver_service_server::DriverService;
use oxray_proto::peer_service_server::PeerService;
use oxray_proto::worker_service_server::WorkerService;
use oxray_proto::{
    ActorInfo, ActorRequest, ActorState, AgentTableSizes, Assignment, CancelRequest, ClusterInfoReply,
    CreateActorReply, CreateActorRequest, CreateObjectReply, CreateObjectRequest, DatasetUpdate, DriverHello,
    DriverRecord, DriverSessionEvent, DriverSessionReply, Empty, ExperimentUpdate, FunctionBlob, FunctionId,
    GetNamedActorReply, GetNamedActorRequest, GetObjectsReply, GetObjectsRequest, ListActorsReply,
    ListPlacementGroupsReply, LogBatch, MetricsReport, ObjectChunk, PeerEvent, PeerMessage, PlacementGroupInfo,
    PlacementGroupReply, PlacementGroupRequest, PlacementGroupSpec, PullRequest, PutObjectRequest,
    RegisterActorRequest, ReserveBundlesRequest, ServeCheckpoint, ServeRoutes, ServeRoutesReply, ServeUpdate,
    SubmitBatchRequest, SubscribeLogsRequest, TaskCancelledReply, TaskCancelledRequest, TaskDoneRequest,
    TrainRunUpdate, UpdateRefsRequest, WaitObjectsReply, WaitObjectsRequest, WarmWorkersRequest, WorkerEvent,
    driver_session_event, peer_message, worker_event,
};
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct AgentService {
    pub shared: Arc<AgentShared>,
    pub address: String,
}

type AssignmentStream = UnboundedReceiverStream<Result<Assignment, Status>>;

/// How long a joined driver may stay silent before its session ends.
const DEFAULT_DRIVER_LEASE: Duration = Duration::from_secs(30);

/// The driver lease: `OXRAY_DRIVER_LEASE_S` seconds (tests shorten it), else 30 s.
fn driver_lease() -> Duration {
    let Ok(raw) = std::env::var("OXRAY_DRIVER_LEASE_S") else { return DEFAULT_DRIVER_LEASE };
    match raw.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()) {
        Some(lease) if lease >= Duration::from_millis(100) => lease,
        _ => {
            tracing::warn!(
                "OXRAY_DRIVER_LEASE_S={raw:?} is not a number of seconds >= 0.1; using {} s",
                DEFAULT_DRIVER_LEASE.as_secs()
            );
            DEFAULT_DRIVER_LEASE
        }
    }
}

impl AgentService {
    /// The head's record of a driver of this node, started now.
    fn driver_record(&self, hello: &DriverHello) -> DriverRecord {
        DriverRecord {
            job_id: hello.job_id.clone(),
            node_id: self.shared.state.lock().node_id.to_vec(),
            node_ip: self.address.rsplit_once(':').map(|(host, _)| host).unwrap_or(&self.address).to_string(),
            pid: hello.pid,
            entrypoint: hello.entrypoint.clone(),
            submission_id: hello.submission_id.clone(),
            start_time_ms: clock::now_ms(),
            end_time_ms: 0,
        }
    }

    /// Tells the head a driver started or ended (for the Jobs API's listing);
    /// a head that cannot be told only loses a listing row.
    async fn report_driver(&self, driver: DriverRecord) {
        let Some(mut head) = self.shared.head() else { return };
        if let Err(e) = head.update_driver(driver).await {
            tracing::debug!("cannot tell the head about a driver: {e}");
        }
    }

    /// An embedded driver (in this process, without a session): listed as
    /// running while the node lives.
    pub async fn local_driver_started(&self, hello: &DriverHello) {
        self.report_driver(self.driver_record(hello)).await;
    }
}

#[tonic::async_trait]
impl DriverService for AgentService {
    type DriverSessionStream = tokio_stream::wrappers::ReceiverStream<Result<DriverSessionReply, Status>>;

    async fn driver_session(
        &self,
        request: Request<tonic::Streaming<DriverSessionEvent>>,
    ) -> Result<Response<Self::DriverSessionStream>, Status> {
        let mut events = request.into_inner();
        let hello = match events.message().await? {
            Some(DriverSessionEvent { event: Some(driver_session_event::Event::Hello(h)) }) => h,
            _ => return Err(AgentError::Malformed("a driver session must start with a hello").into()),
        };
        let client = ClientId::from_bytes(&hello.client_id).map_err(AgentError::from)?;
        let job = JobId::from_bytes(&hello.job_id).map_err(AgentError::from)?;
        if !self.shared.with_state(|st| st.driver_connected(client, job)) {
            return Err(AgentError::DriverSessionUsed(client).into());
        }
        let lease = driver_lease();
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let _ = tx.send(Ok(DriverSessionReply { lease_ms: lease.as_millis() as u64 })).await;
        let mut driver = self.driver_record(&hello);
        self.report_driver(driver.clone()).await;
        let shared = self.shared.clone();
        let service = self.clone();
        tokio::spawn(async move {
            let why = loop {
                match tokio::time::timeout(lease, events.message()).await {
                    Ok(Ok(Some(_))) => continue,
                    Ok(Ok(None)) => break "it ended its session".to_string(),
                    Ok(Err(e)) => break format!("its connection broke: {}", e.message()),
                    Err(_) => break format!("no ping within its {:.1} s lease", lease.as_secs_f64()),
                }
            };
            let now_ms = clock::now_ms();
            shared.with_state(|st| st.driver_gone(client, &why, now_ms));
            driver.end_time_ms = now_ms.max(1);
            service.report_driver(driver).await;
            // Dropping `tx` ends the reply stream: a driver shutting down waits for it.
            drop(tx);
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    #[tracing::instrument(skip_all, fields(name = ?request.get_ref().spec.as_ref().map(|s| &s.name)))]
    async fn create_actor(&self, request: Request<CreateActorRequest>) -> Result<Response<CreateActorReply>, Status> {
        let req = request.into_inner();
        let spec = req.spec.ok_or(AgentError::Malformed("CreateActor needs a spec"))?;
        let owner = ClientId::from_bytes(&spec.owner_id).map_err(AgentError::from)?;
        self.shared.learn_before_submit(std::slice::from_ref(&spec)).await;
        if let Some(mut head) = self.shared.head() {
            let info = ActorInfo {
                actor_id: spec.actor_id.clone(),
                class_name: spec.name.clone(),
                state: ActorState::PendingCreation as i32,
                name: spec.actor_name.clone(),
                namespace: spec.namespace.clone(),
                max_task_retries: spec.max_task_retries,
                node_id: self.shared.state.lock().node_id.to_vec(),
                job_id: spec.job_id.clone(),
                detached: spec.detached,
                resources: spec.resources.clone(),
                placement_group_id: super::placement_group_of(&spec),
                ..Default::default()
            };
            let reply = head
                .register_actor(RegisterActorRequest { actor: Some(info), get_if_exists: req.get_if_exists })
                .await?
                .into_inner();
            if reply.existing {
                return Ok(Response::new(CreateActorReply { actor_id: reply.actor_id, existing: true }));
            }
        }
        let (actor_id, existing) = self.shared.with_state(|st| {
            // Its driver's end was seen while the head registered it: it must not start.
            if st.driver_has_ended(&owner) {
                return Err(AgentError::DriverSessionUsed(owner));
            }
            let (actor_id, existing) = st.register_actor(&spec, req.get_if_exists)?;
            if !existing {
                if !spec.detached {
                    st.reclaim_when_unreferenced(actor_id);
                }
                let now_ms = clock::now_ms();
                st.submit(owner, spec, now_ms)?;
                st.schedule(now_ms);
            }
            Ok::<_, AgentError>((actor_id, existing))
        })?;
        Ok(Response::new(CreateActorReply { actor_id: actor_id.to_vec(), existing }))
    }

    #[tracing::instrument(level = "trace", skip_all, fields(tasks = request.get_ref().specs.len()))]
    async fn submit_batch(&self, request: Request<SubmitBatchRequest>) -> Result<Response<Empty>, Status> {
        self.shared.apply_submissions(request.into_inner().specs).await?;
        Ok(Response::new(Empty {}))
    }

    async fn create_object(
        &self,
        request: Request<CreateObjectRequest>,
    ) -> Result<Response<CreateObjectReply>, Status> {
        let req = request.into_inner();
        let id = ObjectId::from_bytes(&req.object_id).map_err(AgentError::from)?;
        if req.ref_deltas.is_some() {
            let client = ClientId::from_bytes(&req.client_id).map_err(AgentError::from)?;
            self.shared.with_ref_changes(client, &req.ref_deltas, || Ok(()))?;
        }
        let size = req.size as usize;
        let location = self.shared.reserving(size, |st, may_spill| st.reserve_object(id, size, may_spill)).await?;
        Ok(Response::new(CreateObjectReply { location: Some(location) }))
    }

    async fn put_object(&self, request: Request<PutObjectRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let client = ClientId::from_bytes(&req.client_id).map_err(AgentError::from)?;
        let object = req.object.ok_or(AgentError::Malformed("PutObject needs an object"))?;
        let id = ObjectId::from_bytes(&object.object_id).map_err(AgentError::from)?;
        let nested = object_ids(&req.nested_refs)?;
        self.shared.with_ref_changes(client, &req.ref_deltas, || {
            self.shared.with_state(|st| {
                st.add_holders(client, &[id]);
                if st.is_local(&id) {
                    // Put again under the same id (a retried generator's item): the first copy stays.
                    return Ok(());
                }
                let now_ms = clock::now_ms();
                let sealed = st.seal_object(&object, &nested, now_ms);
                st.schedule(now_ms);
                sealed
            })
        })?;
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(level = "trace", skip_all, fields(objects = request.get_ref().object_ids.len(), fail_fast = request.get_ref().fail_fast))]
    async fn get_objects(&self, request: Request<GetObjectsRequest>) -> Result<Response<GetObjectsReply>, Status> {
        let req = request.into_inner();
        let client = ClientId::from_bytes(&req.client_id).map_err(AgentError::from)?;
        // Its views were released when it ended: it must not read ranges nobody counts.
        if self.shared.with_state(|st| st.driver_has_ended(&client)) {
            return Err(AgentError::DriverEnded(client).into());
        }
        let submissions = req.submissions;
        self.shared.apply_increfs(client, &req.ref_deltas)?;
        self.shared.apply_submissions(submissions).await?;
        self.shared.apply_decrefs(client, &req.ref_deltas)?;
        let wanted = object_ids(&req.object_ids)?;
        let worker = self.shared.as_blocking_worker(client);
        let deadline = timeout_deadline(req.timeout_ms);
        let timed_out = GetObjectsReply { objects: Vec::new(), timed_out: true, failed: false };
        match self.shared.wait_ready(&wanted, wanted.len(), deadline, worker, req.fail_fast).await {
            Waited::TimedOut => return Ok(Response::new(timed_out)),
            Waited::Failed(id) => {
                // The caller raises this object's error; the others are not waited for.
                let object = self.shared.state.lock().locate(id, client);
                return Ok(Response::new(GetObjectsReply { objects: vec![object], timed_out: false, failed: true }));
            }
            Waited::Ready => {}
        }
        if !self.shared.wait_local(&wanted, deadline).await {
            return Ok(Response::new(timed_out));
        }
        let objects = {
            let mut st = self.shared.state.lock();
            wanted.iter().map(|id| st.locate(*id, client)).collect()
        };
        Ok(Response::new(GetObjectsReply { objects, timed_out: false, failed: false }))
    }

    #[tracing::instrument(level = "trace", skip_all, fields(objects = request.get_ref().object_ids.len(), need = request.get_ref().num_returns))]
    async fn wait_objects(&self, request: Request<WaitObjectsRequest>) -> Result<Response<WaitObjectsReply>, Status> {
        let req = request.into_inner();
        let wanted = object_ids(&req.object_ids)?;
        let need = (req.num_returns as usize).min(wanted.len());
        let client = ClientId::from_bytes(&req.client_id).map_err(AgentError::from)?;
        let worker = self.shared.as_blocking_worker(client);
        self.shared.wait_ready(&wanted, need, timeout_deadline(req.timeout_ms), worker, false).await;
        let st = self.shared.state.lock();
        let ready_ids = wanted.iter().filter(|id| st.is_settled(id)).map(|id| id.to_vec()).collect();
        Ok(Response::new(WaitObjectsReply { ready_ids }))
    }

    async fn update_refs(&self, request: Request<UpdateRefsRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let client = ClientId::from_bytes(&req.client_id).map_err(AgentError::from)?;
        self.shared.with_ref_changes(client, &req.ref_deltas, || Ok(()))?;
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(skip_all, fields(actor = %hex::encode(&request.get_ref().actor_id)))]
    async fn kill_actor(&self, request: Request<ActorRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let id = ActorId::from_bytes(&req.actor_id).map_err(AgentError::from)?;
        let known_here = self.shared.state.lock().actor(&id).is_some();
        if !known_here && let Some(mut head) = self.shared.head() {
            // Met here for the first time, or forgotten since it died: the head knows
            // where it lives or how it died. Unknown to the head too, it died long ago
            // and killing it does nothing (as in Ray).
            let request = ActorRequest { actor_id: req.actor_id.clone(), ..Default::default() };
            match head.get_actor(request).await.map(|r| r.into_inner().actor) {
                Ok(Some(info)) => self.shared.with_state(|st| st.add_actor_proxy(&info))?,
                Ok(None) => return Ok(Response::new(Empty {})),
                Err(status) => return Err(status),
            }
        }
        self.shared.with_state(|st| st.kill_actor(id, req.no_restart, clock::now_ms()))?;
        if req.no_restart {
            // The head hears before `kill` returns, so the name is free for the caller's next call.
            let info = {
                let st = self.shared.state.lock();
                st.actor(&id).filter(|a| a.remote.is_none()).map(|a| actor_info(a, &st.node_id))
            };
            if let (Some(info), Some(mut head)) = (info, self.shared.head()) {
                head.update_actor(info).await?;
            }
        }
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(skip_all, fields(object = %hex::encode(&request.get_ref().object_id), force = request.get_ref().force))]
    async fn cancel_task(&self, request: Request<CancelRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let id = ObjectId::from_bytes(&req.object_id).map_err(AgentError::from)?;
        self.shared.with_state(|st| {
            let now_ms = clock::now_ms();
            st.cancel_from_client(id, req.force, req.recursive, now_ms);
            st.schedule(now_ms);
        });
        Ok(Response::new(Empty {}))
    }

    async fn get_named_actor(
        &self,
        request: Request<GetNamedActorRequest>,
    ) -> Result<Response<GetNamedActorReply>, Status> {
        let req = request.into_inner();
        if let Some(mut head) = self.shared.head() {
            let mut reply = head.get_named_actor(req).await?.into_inner();
            // An actor this node has seen die or killed for good (a `kill` just made here, say) is
            // gone even if the head has not heard yet: a lookup right after `kill` must not find it.
            let dead_here = reply.actor.as_ref().is_some_and(|a| {
                ActorId::from_bytes(&a.actor_id)
                    .is_ok_and(|id| self.shared.state.lock().actor(&id).is_some_and(|e| e.is_ending()))
            });
            if dead_here {
                reply = GetNamedActorReply { found: false, actor: None };
            }
            return Ok(Response::new(reply));
        }
        let st = self.shared.state.lock();
        let actor = st.named_actor(&req.namespace, &req.name).map(|a| actor_info(a, &st.node_id));
        Ok(Response::new(GetNamedActorReply { found: actor.is_some(), actor }))
    }

    async fn get_actor_info(&self, request: Request<ActorRequest>) -> Result<Response<GetNamedActorReply>, Status> {
        let req = request.into_inner();
        let id = ActorId::from_bytes(&req.actor_id).map_err(AgentError::from)?;
        let local = {
            let st = self.shared.state.lock();
            st.actor(&id).map(|a| actor_info(a, &st.node_id))
        };
        match (local, self.shared.head()) {
            (Some(actor), _) => Ok(Response::new(GetNamedActorReply { found: true, actor: Some(actor) })),
            (None, Some(mut head)) => head.get_actor(req).await,
            (None, None) => Ok(Response::new(GetNamedActorReply { found: false, actor: None })),
        }
    }

    async fn list_actors(&self, request: Request<Empty>) -> Result<Response<ListActorsReply>, Status> {
        if let Some(mut head) = self.shared.head() {
            return head.list_actors(request.into_inner()).await;
        }
        let st = self.shared.state.lock();
        Ok(Response::new(ListActorsReply { actors: st.actors().map(|a| actor_info(a, &st.node_id)).collect() }))
    }

    async fn register_function(&self, request: Request<FunctionBlob>) -> Result<Response<Empty>, Status> {
        let blob = request.into_inner();
        let job = if blob.job_id.is_empty() {
            None
        } else {
            Some(JobId::from_bytes(&blob.job_id).map_err(AgentError::from)?)
        };
        self.shared.state.lock().register_function(blob.function_id, blob.data, job);
        Ok(Response::new(Empty {}))
    }

    async fn get_function(&self, request: Request<FunctionId>) -> Result<Response<FunctionBlob>, Status> {
        let id = request.into_inner().function_id;
        let data = self.shared.state.lock().function(&id);
        match data {
            Some(data) => Ok(Response::new(FunctionBlob { function_id: id, data, job_id: Vec::new() })),
            None => Err(AgentError::UnknownFunction(hex::encode(&id)).into()),
        }
    }

    async fn cluster_info(&self, _request: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        let own = self.shared.node_info(&self.address);
        let head = self.shared.head.lock().clone();
        let listed = match head {
            Some(mut head) => head.list_nodes(Empty {}).await.map(|r| r.into_inner().nodes).ok(),
            None => None,
        };
        if let Some(nodes) = &listed {
            // A caller that sees a node in this list can place work there at once (node affinity,
            // SPREAD), not only after this node's next heartbeat.
            self.shared.with_state(|st| st.update_peers(nodes, clock::now_ms()));
        }
        let mut nodes = listed.unwrap_or_default();
        // This node's own numbers are live; the head's lag by a heartbeat.
        match nodes.iter_mut().find(|n| n.node_id == own.node_id) {
            Some(n) => {
                n.available = own.available;
                n.total = own.total;
            }
            None => nodes.push(own),
        }
        let agent_tables = {
            let st = self.shared.state.lock();
            AgentTableSizes { functions: st.function_count() as u64, actors: st.actor_count() as u64 }
        };
        Ok(Response::new(ClusterInfoReply { nodes, agent_tables: Some(agent_tables) }))
    }

    type SubscribeLogsStream = tokio_stream::wrappers::ReceiverStream<Result<LogBatch, Status>>;

    async fn subscribe_logs(
        &self,
        request: Request<SubscribeLogsRequest>,
    ) -> Result<Response<Self::SubscribeLogsStream>, Status> {
        let job = JobId::from_optional_bytes(&request.into_inner().job_id).map_err(AgentError::from)?;
        Ok(Response::new(self.shared.logs.subscribe(job)))
    }

    async fn create_placement_group(
        &self,
        request: Request<PlacementGroupSpec>,
    ) -> Result<Response<PlacementGroupInfo>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        let spec = request.into_inner();
        let pg_id = PlacementGroupId::from_bytes(&spec.pg_id).map_err(AgentError::from)?;
        let owner_job = match JobId::from_optional_bytes(&spec.job_id).map_err(AgentError::from)? {
            Some(job) if !spec.detached => Some(job),
            _ => None,
        };
        // Noted before the head is asked: if the driver's call gives up while the
        // head still places the group, the driver's end removes it all the same.
        if let Some(job) = owner_job {
            self.shared.with_state(|st| st.note_placement_group(job, pg_id));
        }
        let info = match head.create_placement_group(spec).await {
            Ok(info) => info,
            Err(status) => {
                self.shared.with_state(|st| st.forget_placement_group(&pg_id));
                return Err(status);
            }
        };
        // Learn at once where the bundles went, rather than at the next heartbeat.
        if let Ok(nodes) = head.list_nodes(Empty {}).await {
            self.shared.with_state(|st| st.update_peers(&nodes.into_inner().nodes, clock::now_ms()));
        }
        Ok(info)
    }

    async fn remove_placement_group(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        let request = request.into_inner();
        if let Ok(pg_id) = PlacementGroupId::from_bytes(&request.pg_id) {
            self.shared.with_state(|st| st.forget_placement_group(&pg_id));
        }
        head.remove_placement_group(request).await
    }

    async fn get_placement_group(
        &self,
        request: Request<PlacementGroupRequest>,
    ) -> Result<Response<PlacementGroupReply>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.get_placement_group(request.into_inner()).await
    }

    async fn list_placement_groups(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<ListPlacementGroupsReply>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.list_placement_groups(request.into_inner()).await
    }

    async fn update_train_run(&self, request: Request<TrainRunUpdate>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.update_train_run(request.into_inner()).await
    }

    async fn update_dataset(&self, request: Request<DatasetUpdate>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.update_dataset(request.into_inner()).await
    }

    async fn update_experiment(&self, request: Request<ExperimentUpdate>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.update_experiment(request.into_inner()).await
    }

    async fn update_serve(&self, request: Request<ServeUpdate>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.update_serve(request.into_inner()).await
    }

    async fn save_serve_checkpoint(&self, request: Request<ServeCheckpoint>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.save_serve_checkpoint(request.into_inner()).await
    }

    async fn get_serve_checkpoint(&self, request: Request<Empty>) -> Result<Response<ServeCheckpoint>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.get_serve_checkpoint(request.into_inner()).await
    }

    async fn warm_workers(&self, request: Request<WarmWorkersRequest>) -> Result<Response<Empty>, Status> {
        let mut env_vars: Vec<(String, String)> = request.into_inner().env_vars.into_iter().collect();
        env_vars.sort();
        self.shared.warm_worker_template(&env_vars);
        Ok(Response::new(Empty {}))
    }

    async fn report_metrics(&self, request: Request<MetricsReport>) -> Result<Response<Empty>, Status> {
        self.shared.user_metrics.lock().report(request.into_inner(), std::time::Instant::now());
        Ok(Response::new(Empty {}))
    }

    async fn update_serve_routes(&self, request: Request<ServeRoutes>) -> Result<Response<ServeRoutesReply>, Status> {
        let request = request.into_inner();
        let table = oxray_serve::routes::RouteTable::from_json(&request.table_json)
            .map_err(|e| Status::invalid_argument(format!("Serve's route table is malformed: {e}")))?;
        if !request.forwarded {
            self.shared.forward_serve_routes(request.table_json);
        }
        let address = self
            .shared
            .serve_proxy
            .update(self, table)
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(ServeRoutesReply { proxy_address: address.unwrap_or_default() }))
    }
}

#[tonic::async_trait]
impl WorkerService for AgentService {
    type WorkerConnectStream = AssignmentStream;

    async fn worker_connect(
        &self,
        request: Request<tonic::Streaming<WorkerEvent>>,
    ) -> Result<Response<Self::WorkerConnectStream>, Status> {
        let mut events = request.into_inner();
        let hello = match events.message().await? {
            Some(WorkerEvent { event: Some(worker_event::Event::Hello(h)) }) => h,
            _ => return Err(AgentError::Malformed("a worker stream must start with a hello").into()),
        };
        let worker_id = WorkerId::from_bytes(&hello.worker_id).map_err(AgentError::from)?;
        // Unbounded; `AssignmentSender` says what bounds it.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.shared.with_state(|st| st.worker_connected(worker_id, tx, clock::now_ms()))?;
        let shared = self.shared.clone();
        tokio::spawn(async move {
            while let Ok(Some(event)) = events.message().await {
                // Events that arrive after the worker was declared dead are stale.
                if !shared.state.lock().has_worker(&worker_id) {
                    break;
                }
                let outcome = match event.event {
                    Some(worker_event::Event::Done(done)) => shared.handle_task_done(worker_id, done),
                    Some(worker_event::Event::Refs(deltas)) => {
                        shared.with_ref_changes(worker_id.into(), &Some(deltas), || Ok(()))
                    }
                    _ => Err(AgentError::Malformed("a worker sent a second hello or an empty event")),
                };
                if let Err(status) = outcome {
                    tracing::warn!("bad event from worker {worker_id}: {status}");
                }
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn task_done(&self, request: Request<TaskDoneRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let worker = WorkerId::from_bytes(&req.worker_id).map_err(AgentError::from)?;
        self.shared.handle_task_done(worker, req)?;
        Ok(Response::new(Empty {}))
    }

    async fn task_cancelled(
        &self,
        request: Request<TaskCancelledRequest>,
    ) -> Result<Response<TaskCancelledReply>, Status> {
        let task = TaskId::from_bytes(&request.into_inner().task_id).map_err(AgentError::from)?;
        let cancelled = self.shared.state.lock().is_cancelled(task);
        Ok(Response::new(TaskCancelledReply { cancelled }))
    }
}

#[tonic::async_trait]
impl PeerService for AgentService {
    type PeerLinkStream = UnboundedReceiverStream<Result<PeerEvent, Status>>;

    async fn peer_link(
        &self,
        request: Request<tonic::Streaming<PeerMessage>>,
    ) -> Result<Response<Self::PeerLinkStream>, Status> {
        let mut incoming = request.into_inner();
        let hello = match incoming.message().await? {
            Some(PeerMessage { msg: Some(peer_message::Msg::Hello(hello)) }) => hello,
            _ => return Err(AgentError::Malformed("a peer link must start with a hello").into()),
        };
        let owner = NodeId::from_bytes(&hello.node_id).map_err(AgentError::from)?;
        // Unbounded; `peers::EventSender` says what bounds it.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.shared.serve_link(owner, incoming, tx);
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    type PullObjectStream = tokio_stream::wrappers::ReceiverStream<Result<ObjectChunk, Status>>;

    #[tracing::instrument(level = "debug", skip_all, fields(object = %hex::encode(&request.get_ref().object_id)))]
    async fn pull_object(&self, request: Request<PullRequest>) -> Result<Response<Self::PullObjectStream>, Status> {
        let id = ObjectId::from_bytes(&request.into_inner().object_id).map_err(AgentError::from)?;
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(self.shared.serve_pull(id))))
    }
}

#[tonic::async_trait]
impl BundleService for AgentService {
    #[tracing::instrument(skip_all, fields(group = %hex::encode(&request.get_ref().pg_id), bundles = request.get_ref().bundles.len()))]
    async fn reserve_bundles(&self, request: Request<ReserveBundlesRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let pg_id = PlacementGroupId::from_bytes(&req.pg_id).map_err(AgentError::from)?;
        let mut bundles = Vec::new();
        for slot in &req.bundles {
            let resources = crate::resources::ResourceSet::from_map(&slot.resources).map_err(AgentError::from)?;
            bundles.push((slot.index, resources));
        }
        self.shared.with_state(|st| st.reserve_bundles(pg_id, &bundles))?;
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(skip_all, fields(group = %hex::encode(&request.get_ref().pg_id)))]
    async fn commit_bundles(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let pg_id = PlacementGroupId::from_bytes(&request.into_inner().pg_id).map_err(AgentError::from)?;
        self.shared.with_state(|st| st.commit_bundles(pg_id, clock::now_ms()))?;
        Ok(Response::new(Empty {}))
    }

    #[tracing::instrument(skip_all, fields(group = %hex::encode(&request.get_ref().pg_id)))]
    async fn return_bundles(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let pg_id = PlacementGroupId::from_bytes(&request.into_inner().pg_id).map_err(AgentError::from)?;
        self.shared.with_state(|st| st.return_bundles(pg_id, clock::now_ms()));
        Ok(Response::new(Empty {}))
    }
}
