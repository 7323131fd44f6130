//! Serve's HTTP and gRPC proxies in a node agent (`oxray_http::serve_proxy` does the HTTP and the
//! gRPC). The controller sends its route table (`DriverService.UpdateServeRoutes`); the agent starts,
//! restarts or stops its proxies as the table's `http_options`, `grpc_options` and `proxy_location`
//! say (a gRPC proxy only beside an HTTP one, on its host), and the proxies call replicas
//! as any client of this agent would: an actor call submitted in-process with its wait (one
//! `GetObjects` carrying the submission), the result read here, the reference dropped after.

use super::AgentShared;
use super::service::AgentService;
use crate::ids::{ActorId, ClientId, ObjectId, TaskId};
use crate::proto::driver_service_server::DriverService;
use crate::proto::{GetObjectsRequest, RefDeltas, SubmitBatchRequest, TaskArg, TaskKind, TaskSpec, UpdateRefsRequest};
use oxray_http::serve_proxy::{GrpcServer, ProxyServer, ReplicaCallError, ReplicaCalls, ServeProxy};
use oxray_proto::object_location::Place;
use oxray_serve::routes::{ProxyLocation, RouteTable};
use std::sync::Arc;

/// The pickle of one out-of-band buffer (protocol 5: PROTO, NEXT_BUFFER, STOP): a request
/// reaches the replica as a buffer, and a reply comes back as one (`pickle.PickleBuffer`).
const BUFFER_PICKLE: &[u8] = b"\x80\x05\x97.";

/// This node's proxy, when it runs one.
#[derive(Default)]
pub(crate) struct ServeProxyHost {
    running: tokio::sync::Mutex<Option<Running>>,
    /// The running proxy, for its metrics (read without waiting on a start or stop).
    current: parking_lot::Mutex<Option<Arc<ServeProxy>>>,
    /// Set for the head node's agent (`HeadOnly` runs a proxy there only).
    pub(crate) on_head: std::sync::atomic::AtomicBool,
}

struct Running {
    proxy: Arc<ServeProxy>,
    server: ProxyServer,
    /// The gRPC proxy beside it, when the table's `grpc_options` name servicer functions.
    grpc: Option<GrpcServer>,
}

impl ServeProxyHost {
    /// Applies the controller's table: the address the proxy listens on, or None when this node
    /// runs none. An address it cannot bind is the error.
    pub(crate) async fn update(&self, service: &AgentService, table: RouteTable) -> std::io::Result<Option<String>> {
        let on_head = self.on_head.load(std::sync::atomic::Ordering::Relaxed);
        let wanted = match (&table.http, table.proxy_location) {
            (None, _) | (_, ProxyLocation::Disabled) => None,
            (Some(_), ProxyLocation::HeadOnly) if !on_head => None,
            (Some(http), _) => Some(http.clone()),
        };
        let mut running = self.running.lock().await;
        let Some(options) = wanted else {
            if let Some(old) = running.take() {
                old.stop().await;
            }
            *self.current.lock() = None;
            return Ok(None);
        };
        if running.as_ref().is_some_and(|r| r.server.options != options) {
            let old = running.take().expect("checked");
            old.stop().await;
        }
        if running.is_none() {
            let calls = Arc::new(AgentReplicaCalls { service: service.clone(), client_id: ClientId::random() });
            let proxy = ServeProxy::new(calls);
            let server = ProxyServer::start(options.clone(), proxy.clone()).await?;
            tracing::info!("Serve's HTTP proxy listens on {}", server.local_addr);
            *self.current.lock() = Some(proxy.clone());
            *running = Some(Running { proxy, server, grpc: None });
        }
        let running = running.as_mut().expect("started above");
        let grpc = table.grpc.clone().filter(|g| !g.grpc_servicer_functions.is_empty());
        let wanted_grpc = grpc.map(|g| (options.host.clone(), g));
        if running.grpc.as_ref().map(|g| &g.options) != wanted_grpc.as_ref() {
            if let Some(old) = running.grpc.take() {
                old.shutdown().await;
            }
            if let Some((host, grpc)) = wanted_grpc {
                let server =
                    GrpcServer::start(&host, grpc, options.max_request_body_bytes, running.proxy.clone()).await?;
                tracing::info!("Serve's gRPC proxy listens on {}", server.local_addr);
                running.grpc = Some(server);
            }
        }
        running.proxy.set_table(table);
        Ok(Some(running.server.local_addr.to_string()))
    }

    /// Stops the proxy (the node is going away).
    pub(crate) async fn stop(&self) {
        *self.current.lock() = None;
        if let Some(old) = self.running.lock().await.take() {
            old.stop().await;
        }
    }
}

impl Running {
    async fn stop(self) {
        if let Some(grpc) = self.grpc {
            grpc.shutdown().await;
        }
        self.server.shutdown().await;
    }
}

/// Replica calls through this agent, as a client of its own.
struct AgentReplicaCalls {
    service: AgentService,
    client_id: ClientId,
}

impl AgentReplicaCalls {
    fn spec(
        &self,
        actor_id: &str,
        method: &'static str,
        payload: &[u8],
    ) -> Result<(TaskSpec, ObjectId), ReplicaCallError> {
        let actor = hex_bytes(actor_id)
            .and_then(|raw| ActorId::from_bytes(&raw).ok())
            .ok_or_else(|| ReplicaCallError::Failed(format!("the route table names a bad actor id {actor_id:?}")))?;
        let object = oxray_object_store::plan(BUFFER_PICKLE.len(), &[payload.len()]);
        let mut value = vec![0u8; object.total_size];
        oxray_object_store::write_object(&mut value, &object, 0, BUFFER_PICKLE, &[payload]);
        let return_id = ObjectId::random();
        let spec = TaskSpec {
            task_id: TaskId::random().to_vec(),
            name: format!("ServeReplica.{method}"),
            kind: TaskKind::ActorTask as i32,
            args: vec![TaskArg { kind: Some(crate::proto::task_arg::Kind::Value(value)) }],
            return_ids: vec![return_id.to_vec()],
            actor_id: actor.to_vec(),
            method_name: method.to_string(),
            owner_id: self.client_id.to_vec(),
            // A stream's next batch, a WebSocket message and a cancel never wait behind new requests:
            // the replica runs them in groups of their own (`STREAM_GROUP`, `HTTP_CONTROL_GROUP` in
            // Serve's controller).
            concurrency_group: match method {
                // Waits for the app's next batch: a thread each while a body or a socket is open.
                "http_next" | "ws_next" | "grpc_next" => "serve_http_stream".into(),
                // Quick: never behind the waits above.
                "http_cancel" | "ws_receive" | "grpc_cancel" => "serve_http_control".into(),
                _ => String::new(),
            },
            ..TaskSpec::default()
        };
        Ok((spec, return_id))
    }
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

impl ReplicaCalls for AgentReplicaCalls {
    fn call(
        &self,
        actor_id: &str,
        method: &'static str,
        payload: Vec<u8>,
    ) -> oxray_http::BoxFuture<'static, Result<Vec<u8>, ReplicaCallError>> {
        let prepared = self.spec(actor_id, method, &payload);
        let (service, client_id) = (self.service.clone(), self.client_id);
        Box::pin(async move {
            let (spec, return_id) = prepared?;
            let request = GetObjectsRequest {
                client_id: client_id.to_vec(),
                object_ids: vec![return_id.to_vec()],
                timeout_ms: -1,
                ref_deltas: None,
                submissions: vec![spec],
                fail_fast: false,
            };
            // Dropped (the client went away) before the reply: the reference still goes.
            let mut release = ReleaseReturn { service: service.clone(), client_id, id: return_id, view: false };
            let reply = service.get_objects(tonic::Request::new(request)).await;
            let location = reply
                .map_err(|status| ReplicaCallError::Failed(status.message().to_string()))?
                .into_inner()
                .objects
                .pop()
                .ok_or_else(|| ReplicaCallError::Failed("the agent returned no object".into()))?;
            let bytes = match location.place {
                Some(Place::InlineData(data)) => data,
                Some(Place::Arena(range)) => {
                    release.view = true;
                    service.shared.state.lock().store_mut().read_arena(range.offset as usize, location.size as usize)
                }
                Some(Place::Path(path)) => {
                    std::fs::read(&path).map_err(|e| ReplicaCallError::Failed(format!("cannot read {path}: {e}")))?
                }
                None => return Err(ReplicaCallError::Failed("the agent returned an object without a place".into())),
            };
            decode_result(&bytes)
        })
    }

    fn notify(&self, actor_id: &str, method: &'static str, payload: Vec<u8>) {
        let Ok((spec, return_id)) = self.spec(actor_id, method, &payload) else { return };
        let (service, client_id) = (self.service.clone(), self.client_id);
        tokio::spawn(async move {
            if service.submit_batch(tonic::Request::new(SubmitBatchRequest { specs: vec![spec] })).await.is_ok() {
                drop(ReleaseReturn { service, client_id, id: return_id, view: false });
            }
        });
    }
}

/// Drops this client's hold on a call's return (and its view of the arena range read).
struct ReleaseReturn {
    service: AgentService,
    client_id: ClientId,
    id: ObjectId,
    view: bool,
}

impl Drop for ReleaseReturn {
    fn drop(&mut self) {
        let deltas = RefDeltas {
            incref: Vec::new(),
            decref: vec![self.id.to_vec()],
            released: if self.view { vec![self.id.to_vec()] } else { Vec::new() },
        };
        let request = UpdateRefsRequest { client_id: self.client_id.to_vec(), ref_deltas: Some(deltas) };
        let service = self.service.clone();
        tokio::spawn(async move {
            if let Err(e) = service.update_refs(tonic::Request::new(request)).await {
                tracing::debug!("Serve's proxy could not drop a reply's reference: {e}");
            }
        });
    }
}

/// A replica's reply: the one out-of-band buffer of a value, or the call's error.
fn decode_result(bytes: &[u8]) -> Result<Vec<u8>, ReplicaCallError> {
    let parsed =
        oxray_object_store::parse(bytes).map_err(|e| ReplicaCallError::Failed(format!("a malformed reply: {e}")))?;
    match parsed.flags {
        0 => match parsed.buffers.as_slice() {
            [only] => Ok(bytes[only.clone()].to_vec()),
            _ => Err(ReplicaCallError::Failed("the replica's reply is not one buffer".into())),
        },
        2 => {
            let error: serde_json::Value = serde_json::from_slice(&bytes[parsed.pickle]).unwrap_or_default();
            let message = format!(
                "{}: {}",
                error["type"].as_str().unwrap_or("RaySystemError"),
                error["message"].as_str().unwrap_or("")
            );
            if matches!(error["type"].as_str(), Some("ActorDiedError" | "ActorUnavailableError")) {
                Err(ReplicaCallError::ActorDied(message))
            } else {
                Err(ReplicaCallError::Failed(message))
            }
        }
        _ => Err(ReplicaCallError::Failed("the replica's HTTP handler raised (its log has the traceback)".into())),
    }
}

impl AgentShared {
    /// Sends the controller's table on to every other live node, whose proxies route by it too
    /// (`EveryNode`; under `HeadOnly` they stop theirs). A node that cannot be reached logs it;
    /// the controller sends the table again every few seconds, so a node that joins later gets it.
    pub(crate) fn forward_serve_routes(self: &Arc<Self>, table_json: Vec<u8>) {
        let peers = self.state.lock().alive_peer_addresses();
        for address in peers {
            let (shared, table_json) = (self.clone(), table_json.clone());
            tokio::spawn(async move {
                let sent = async {
                    let mut agent = shared.peers.channels.driver(&address, &shared.token()).await?;
                    agent
                        .update_serve_routes(crate::proto::ServeRoutes { table_json, forwarded: true })
                        .await
                        .map_err(crate::client::ClientError::from)
                };
                if let Err(e) = sent.await {
                    tracing::warn!("Serve's route table did not reach the node at {address}: {e}");
                }
            });
        }
    }

    /// The proxies' Prometheus series ("" when the node runs none; gRPC's once it ran).
    pub(crate) fn serve_proxy_metrics(&self, node_id: &str, ip: &str) -> String {
        let proxy = self.serve_proxy.current.lock().clone();
        proxy.map(|p| p.metrics.render(node_id, ip) + &p.grpc_metrics.render(node_id, ip)).unwrap_or_default()
    }

    /// The proxy's counters per application (`{}` when the node runs none).
    pub(crate) fn serve_proxy_counters(&self) -> serde_json::Value {
        let proxy = self.serve_proxy.current.lock().clone();
        proxy.map(|p| p.metrics.per_application()).unwrap_or_else(|| serde_json::json!({}))
    }

    /// Ends this node's proxy, at shutdown.
    pub async fn stop_serve_proxy(&self) {
        self.serve_proxy.stop().await;
    }
}
