//! The controllers: watch `OxrayCluster`s, `OxrayJob`s, `OxrayService`s and what
//! they own, observe, call the pure reconcile steps (`cluster::plan`,
//! `job::plan`, `service::plan`) and carry out what they return against the API
//! server and the clusters' heads. A finalizer on each
//! resource deletes what it owns before it goes (owner references let
//! Kubernetes' garbage collector do the same; the finalizer does not rely on it).

use crate::autoscale::Demand;
use crate::cluster::{self, CLUSTER_LABEL, Child, Observed, ObservedPod, TOKEN_KEY};
use crate::crd::{OxrayCluster, OxrayJob, OxrayJobStatus, OxrayService};
use crate::error::{CaError, DemandError, ReconcileError};
use crate::head_api::{Head, HeadClient, TrustedCa};
use crate::job::{self, ClusterView, JobObserved};
use crate::service::{self, ServeClusterView, ServiceObserved};
use crate::spec;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

/// The finalizer on every `OxrayCluster` and `OxrayJob`.
pub const FINALIZER: &str = "oxray.io/finalizer";

/// How the operator reaches a cluster's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HeadVia {
    /// The head Service's DNS name (the operator runs in the cluster).
    Service,
    /// The head pod's IP (the operator runs where pod IPs are routable but Service DNS is not).
    PodIp,
}

/// The operator's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    pub head_via: HeadVia,
    /// How often a cluster is looked at again without an event (autoscaling, job status).
    pub poll: Duration,
}

struct Context {
    client: Client,
    head: HeadClient,
    settings: Settings,
}

/// Runs both controllers until the process is stopped.
pub async fn run(client: Client, settings: Settings) -> anyhow::Result<()> {
    let ctx = Arc::new(Context { client: client.clone(), head: HeadClient::new(), settings: settings.clone() });
    let clusters: Api<OxrayCluster> = api_for(&client, &settings.namespace);
    let jobs: Api<OxrayJob> = api_for(&client, &settings.namespace);
    let owned = || watcher::Config::default().labels(CLUSTER_LABEL);
    let cluster_controller = Controller::new(clusters.clone(), watcher::Config::default())
        .owns(api_for::<Pod>(&client, &settings.namespace), owned())
        .owns(api_for::<Service>(&client, &settings.namespace), owned())
        .shutdown_on_signal()
        .run(reconcile_cluster, retry_later, ctx.clone())
        .for_each(|result| async move { log_failure("cluster", result) });
    let job_controller = Controller::new(jobs, watcher::Config::default())
        .owns(clusters.clone(), watcher::Config::default())
        .shutdown_on_signal()
        .run(reconcile_job, retry_later, ctx.clone())
        .for_each(|result| async move { log_failure("job", result) });
    let serve_services: Api<OxrayService> = api_for(&client, &settings.namespace);
    let service_controller = Controller::new(serve_services, watcher::Config::default())
        .owns(clusters, watcher::Config::default())
        .shutdown_on_signal()
        .run(reconcile_service, retry_later, ctx)
        .for_each(|result| async move { log_failure("service", result) });
    tracing::info!("oxray-operator is watching OxrayClusters, OxrayJobs and OxrayServices");
    futures::join!(cluster_controller, job_controller, service_controller);
    Ok(())
}

/// Logs a failed reconcile; an object deleted before its turn came is not a failure.
fn log_failure<T, E: std::error::Error>(
    what: &str,
    result: Result<T, kube::runtime::controller::Error<E, watcher::Error>>,
) {
    match result {
        Ok(_) => {}
        Err(kube::runtime::controller::Error::ObjectNotFound(object)) => tracing::debug!("{what} {object} is gone"),
        Err(e) => tracing::warn!("{what} reconcile: {e}"),
    }
}

fn api_for<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn retry_later<K>(_: Arc<K>, error: &ReconcileError, _: Arc<Context>) -> Action {
    tracing::warn!("will retry: {error}");
    Action::requeue(Duration::from_secs(5))
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

/// Whether `meta` lists `uid` as an owner.
fn owned_by(owners: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>, uid: &str) -> bool {
    owners.is_some_and(|o| o.iter().any(|o| o.uid == uid))
}

fn has_finalizer<K: Resource>(object: &K) -> bool {
    object.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the finalizer (a merge patch: the whole list, as observed, plus ours).
async fn add_finalizer<K>(api: &Api<K>, object: &K) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    let patch = json!({"metadata": {"finalizers": finalizers}});
    api.patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

async fn remove_finalizer<K>(api: &Api<K>, object: &K) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let finalizers: Vec<&String> = object.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": finalizers}});
    match api.patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// `get`, with any 404 as `None` (kube's `get_opt` wants the reason `NotFound` too).
async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.get(name).await {
        Ok(object) => Ok(Some(object)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

async fn delete_quietly<K>(api: &Api<K>, name: &str) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A JSON merge patch taking `old` to `new`: keys that went away become `null`.
fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in n {
                patch.insert(k.clone(), merge_patch(o.get(k).unwrap_or(&Value::Null), v));
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

async fn patch_status<K, S>(api: &Api<K>, name: &str, old: Option<&S>, new: &S) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if old == Some(new) {
        return Ok(());
    }
    let old = old.map(|s| serde_json::to_value(s).unwrap_or(Value::Null)).unwrap_or(Value::Null);
    let new = serde_json::to_value(new).map_err(ReconcileError::EncodeStatus)?;
    let patch = json!({"status": merge_patch(&old, &new)});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// The cluster token from its Secret (`data`, or `stringData` where nothing converted it).
fn token_of(secret: &Secret) -> Option<String> {
    if let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(TOKEN_KEY)) {
        return String::from_utf8(bytes.0.clone()).ok();
    }
    secret.string_data.as_ref().and_then(|d| d.get(TOKEN_KEY)).cloned()
}

fn observe_pod(pod: &Pod) -> ObservedPod {
    let labels = pod.labels();
    let group = (labels.get(cluster::NODE_TYPE_LABEL).map(String::as_str) == Some("worker"))
        .then(|| labels.get(cluster::GROUP_LABEL).cloned().unwrap_or_default());
    let status = pod.status.as_ref();
    ObservedPod {
        name: pod.name_any(),
        group,
        phase: status.and_then(|s| s.phase.clone()),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        ip: status.and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()),
    }
}

/// The head's Jobs API and dashboard, as this operator reaches it (`scheme` is `http` or `https`).
fn head_url(
    settings: &Settings,
    namespace: &str,
    cluster: &str,
    pod_ip: Option<&str>,
    scheme: &str,
    port: u16,
) -> Option<String> {
    match settings.head_via {
        HeadVia::Service => Some(format!("{scheme}://{}:{port}", cluster::service_host(cluster, namespace))),
        HeadVia::PodIp => pod_ip.map(|ip| format!("{scheme}://{ip}:{port}")),
    }
}

/// The CA `spec.tls` names, read from its Secret; `Ok(Err(_))` says why it cannot be used.
async fn trusted_ca(
    secrets: &Api<Secret>,
    ca: &spec::CaRef,
) -> Result<Result<Arc<TrustedCa>, CaError>, ReconcileError> {
    let Some(secret) = get_opt(secrets, &ca.secret).await? else {
        return Ok(Err(CaError::NoSecret(ca.secret.clone())));
    };
    let pem = match secret.data.as_ref().and_then(|d| d.get(&ca.key)) {
        Some(bytes) => bytes.0.clone(),
        None => match secret.string_data.as_ref().and_then(|d| d.get(&ca.key)) {
            Some(text) => text.clone().into_bytes(),
            None => return Ok(Err(CaError::NoKey { secret: ca.secret.clone(), key: ca.key.clone() })),
        },
    };
    Ok(TrustedCa::from_pem(&pem, &ca.secret, &ca.key).map(Arc::new))
}

async fn reconcile_cluster(oc: Arc<OxrayCluster>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let name = oc.name_any();
    let namespace = oc.namespace().unwrap_or_else(|| "default".to_string());
    let uid = oc.uid().unwrap_or_default();
    let clusters: Api<OxrayCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = ListParams::default().labels(&format!("{CLUSTER_LABEL}={name}"));
    let own = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.labels.as_ref().and_then(|l| l.get(CLUSTER_LABEL)) == Some(&name)
            && owned_by(meta.owner_references.as_ref(), &uid)
    };

    if oc.metadata.deletion_timestamp.is_some() {
        if has_finalizer(oc.as_ref()) {
            for pod in pods.list(&selector).await?.items.iter().filter(|p| own(&p.metadata)) {
                delete_quietly(&pods, &pod.name_any()).await?;
            }
            for service in services.list(&selector).await?.items.iter().filter(|s| own(&s.metadata)) {
                delete_quietly(&services, &service.name_any()).await?;
            }
            // The token Secret by name: the operator may get Secrets, not list them.
            if let Some(secret) = get_opt(&secrets, &cluster::secret_name(&name)).await?
                && own(&secret.metadata)
            {
                delete_quietly(&secrets, &secret.name_any()).await?;
            }
            remove_finalizer(&clusters, oc.as_ref()).await?;
            tracing::info!("cluster {namespace}/{name}: deleted its pods, Service and Secret");
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer(oc.as_ref()) {
        add_finalizer(&clusters, oc.as_ref()).await?;
    }

    let pod_list: Vec<Pod> = pods.list(&selector).await?.items.into_iter().filter(|p| own(&p.metadata)).collect();
    let observed_pods: Vec<ObservedPod> = pod_list.iter().map(observe_pod).collect();
    let secret = get_opt(&secrets, &cluster::secret_name(&name)).await?;
    let service = get_opt(&services, &cluster::service_name(&name)).await?;
    let mut foreign = Vec::new();
    if secret.as_ref().is_some_and(|s| !own(&s.metadata)) {
        foreign.push(format!("Secret {}", cluster::secret_name(&name)));
    }
    if service.as_ref().is_some_and(|s| !own(&s.metadata)) {
        foreign.push(format!("Service {}", cluster::service_name(&name)));
    }
    // What it does not own is never read either (a foreign Secret's token goes nowhere).
    let secret = secret.filter(|s| own(&s.metadata));
    let service = service.filter(|s| own(&s.metadata));
    let mut observed = Observed {
        foreign,
        secret_exists: secret.is_some(),
        service_exists: service.is_some(),
        service_ip: service.as_ref().and_then(|s| s.spec.as_ref()).and_then(|s| s.cluster_ip.clone()),
        pods: observed_pods,
        demand: None,
        demand_error: None,
        head_ca_error: None,
    };
    let checked = spec::check(&name, &oc.spec);
    // An HTTPS head's CA: with none usable, the head is not called (its token would go unverified).
    let mut ca = None;
    if let Some(ca_ref) = checked.as_ref().ok().and_then(|c| c.https_ca.as_ref()) {
        match trusted_ca(&secrets, ca_ref).await? {
            Ok(trusted) => ca = Some(trusted),
            Err(e) => observed.head_ca_error = Some(e),
        }
    }
    let head = observed.pods.iter().find(|p| p.group.is_none() && p.ready && !p.deleting);
    if let (Ok(checked), Some(head), Some(secret)) = (&checked, head, &secret)
        && checked.autoscaling
        && observed.head_ca_error.is_none()
    {
        let url =
            head_url(&ctx.settings, &namespace, &name, head.ip.as_deref(), checked.scheme(), checked.dashboard_port);
        match (url, token_of(secret)) {
            (Some(base), Some(token)) => match ctx.head.demand(&Head { base, token, ca }).await {
                Ok(demand) => observed.demand = Some(demand),
                Err(e) => observed.demand_error = Some(e.into()),
            },
            (None, _) => observed.demand_error = Some(DemandError::HeadPodHasNoIp),
            (_, None) => observed.demand_error = Some(DemandError::NoToken(cluster::secret_name(&name))),
        }
    }
    let token = hex::encode(rand::random::<[u8; 32]>());
    let plan = cluster::plan(&oc, &observed, &token, &now_rfc3339());
    log_demand(&name, observed.demand.as_ref(), &plan);

    for child in &plan.create {
        let created = match child {
            Child::Secret(s) => secrets.create(&PostParams::default(), s).await.map(|_| ()),
            Child::Service(s) => services.create(&PostParams::default(), s).await.map(|_| ()),
            Child::Pod(p) => pods.create(&PostParams::default(), p).await.map(|_| ()),
        };
        match created {
            Ok(()) => {}
            Err(e) if is_conflict(&e) => {} // made by an earlier step whose event has not arrived yet
            Err(e) => return Err(e.into()),
        }
    }
    for pod in &plan.delete_pods {
        delete_quietly(&pods, pod).await?;
    }
    patch_status(&clusters, &name, oc.status.as_ref(), &plan.status).await?;
    let autoscaling = checked.as_ref().is_ok_and(|c| c.autoscaling);
    let settled =
        plan.status.state.as_deref() == Some("ready") && plan.create.is_empty() && plan.delete_pods.is_empty();
    Ok(if autoscaling || !settled {
        Action::requeue(ctx.settings.poll)
    } else {
        Action::requeue(Duration::from_secs(300))
    })
}

fn log_demand(name: &str, demand: Option<&Demand>, plan: &cluster::ClusterPlan) {
    let Some(demand) = demand else { return };
    let creating = plan.create.iter().filter(|c| matches!(c, Child::Pod(_))).count();
    if creating > 0 || !plan.delete_pods.is_empty() {
        let waiting: u32 = demand.requests.iter().map(|(_, n)| n).sum();
        tracing::info!(
            "cluster {name}: {waiting} request(s) waiting; adding {creating} pod(s), removing {:?}",
            plan.delete_pods
        );
    }
}

/// `cluster`'s head as this operator reaches it: the Jobs API's URL, the cluster token, and for
/// HTTPS its CA; `None` while one is not known yet (no head pod IP, no Secret) or while the spec
/// or the CA is not usable (the cluster's status says why).
async fn reach_head(ctx: &Context, namespace: &str, cluster: &OxrayCluster) -> Result<Option<Head>, ReconcileError> {
    let name = cluster.name_any();
    let Ok(checked) = spec::check(&name, &cluster.spec) else { return Ok(None) };
    let pod_ip = cluster.status.as_ref().and_then(|s| s.head.as_ref()).and_then(|h| h.pod_ip.clone());
    let Some(base) =
        head_url(&ctx.settings, namespace, &name, pod_ip.as_deref(), checked.scheme(), checked.dashboard_port)
    else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let ca = match &checked.https_ca {
        Some(ca_ref) => match trusted_ca(&secrets, ca_ref).await? {
            Ok(ca) => Some(ca),
            Err(_) => return Ok(None),
        },
        None => None,
    };
    // Only the cluster's own Secret: a token in one it did not make is sent nowhere.
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let secret = get_opt(&secrets, &cluster::secret_name(&name)).await?;
    let token = secret.filter(|s| owned_by(s.metadata.owner_references.as_ref(), &uid)).as_ref().and_then(token_of);
    Ok(token.map(|token| Head { base, token, ca }))
}

/// A job still running when its OxrayJob is deleted is stopped (on a shared cluster it would run on);
/// a head that cannot be reached is logged, not waited for.
async fn stop_running_job(ctx: &Context, oj: &OxrayJob, namespace: &str, clusters: &Api<OxrayCluster>) {
    let Some(id) = oj.status.as_ref().and_then(OxrayJobStatus::running_job_id) else { return };
    let Ok((cluster_name, _)) = job::cluster_of(oj) else { return };
    let Ok(Some(cluster)) = get_opt(clusters, &cluster_name).await else { return };
    if let Ok(Some(head)) = reach_head(ctx, namespace, &cluster).await {
        match ctx.head.stop_job(&head, id).await {
            Ok(()) => tracing::info!("job {namespace}/{}: deleted, so job {id} was stopped", oj.name_any()),
            Err(e) => tracing::warn!("job {namespace}/{}: deleted, but stopping job {id} failed: {e}", oj.name_any()),
        }
    }
}

async fn reconcile_job(oj: Arc<OxrayJob>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let name = oj.name_any();
    let namespace = oj.namespace().unwrap_or_else(|| "default".to_string());
    let jobs: Api<OxrayJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let clusters: Api<OxrayCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let target = job::cluster_of(&oj);

    if oj.metadata.deletion_timestamp.is_some() {
        if has_finalizer(oj.as_ref()) {
            stop_running_job(&ctx, &oj, &namespace, &clusters).await;
            if let Ok((cluster_name, true)) = &target
                && let Some(c) = get_opt(&clusters, cluster_name).await?
                && owned_by(c.metadata.owner_references.as_ref(), &oj.uid().unwrap_or_default())
            {
                delete_quietly(&clusters, cluster_name).await?;
            }
            remove_finalizer(&jobs, oj.as_ref()).await?;
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer(oj.as_ref()) {
        add_finalizer(&jobs, oj.as_ref()).await?;
    }

    let mut observed = JobObserved { now_s: jiff::Timestamp::now().as_second(), ..Default::default() };
    let mut head: Option<Head> = None;
    if let Ok((cluster_name, _)) = &target
        && let Some(c) = get_opt(&clusters, cluster_name).await?
        && c.metadata.deletion_timestamp.is_none()
    {
        let status = c.status.clone().unwrap_or_default();
        head = reach_head(&ctx, &namespace, &c).await?;
        observed.cluster = ClusterView {
            exists: true,
            ready: status.state.as_deref() == Some("ready") && head.is_some(),
            failed: (status.state.as_deref() == Some("failed")).then(|| status.reason.clone().unwrap_or_default()),
            dashboard_url: status.head.as_ref().map(|h| h.dashboard_url.clone()),
        };
    }
    if let Some(id) = oj.status.as_ref().and_then(OxrayJobStatus::running_job_id)
        && let Some(head) = &head
    {
        observed.job = Some(ctx.head.job(head, id).await);
    }

    let plan = job::plan(&oj, &observed);
    if let Some(cluster) = &plan.create_cluster {
        match clusters.create(&PostParams::default(), cluster).await {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut status = plan.status.clone();
    if let Some(body) = &plan.submit {
        let Some(head) = &head else {
            return Err(ReconcileError::HeadNotReachable);
        };
        match ctx.head.submit_job(head, body).await {
            Ok(_) => tracing::info!("job {namespace}/{name}: submitted as {}", body["submission_id"]),
            Err(e) => {
                // Not submitted: keep trying, saying why.
                status = oj.status.clone().unwrap_or_default();
                status.message = Some(e.not_submitted_message());
                patch_status(&jobs, &name, oj.status.as_ref(), &status).await?;
                return Ok(Action::requeue(ctx.settings.poll));
            }
        }
    }
    if plan.delete_cluster
        && let Ok((cluster_name, true)) = &target
    {
        delete_quietly(&clusters, cluster_name).await?;
        tracing::info!("job {namespace}/{name}: finished; deleted its cluster {cluster_name}");
    }
    patch_status(&jobs, &name, oj.status.as_ref(), &status).await?;
    let finished = status.finished();
    let waiting_to_delete = finished
        && oj.spec.shutdown_after_job_finishes.unwrap_or(false)
        && status.cluster_deleted != Some(true)
        && oj.spec.ray_cluster_spec.is_some();
    Ok(if !finished || waiting_to_delete { Action::requeue(ctx.settings.poll) } else { Action::await_change() })
}

/// Ready pods the serve Service selects on `cluster`: its ready workers, and its head unless excluded.
fn serve_pods(cluster: &OxrayCluster, exclude_head: bool) -> i32 {
    let Some(status) = &cluster.status else { return 0 };
    let head_ready = status.conditions.iter().any(|c| c.type_ == "HeadPodReady" && c.status == "True");
    status.ready_worker_replicas + i32::from(head_ready && !exclude_head)
}

/// Sets (or with `None` removes) an annotation on a cluster.
async fn annotate(
    clusters: &Api<OxrayCluster>,
    cluster: &str,
    key: &str,
    value: Option<String>,
) -> Result<(), ReconcileError> {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    match clusters.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn reconcile_service(os: Arc<OxrayService>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let name = os.name_any();
    let namespace = os.namespace().unwrap_or_else(|| "default".to_string());
    let uid = os.uid().unwrap_or_default();
    let serve_services: Api<OxrayService> = Api::namespaced(ctx.client.clone(), &namespace);
    let clusters: Api<OxrayCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = ListParams::default().labels(&format!("{}={name}", service::SERVICE_LABEL));
    let mine: Vec<OxrayCluster> = clusters
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|c| owned_by(c.metadata.owner_references.as_ref(), &uid))
        .collect();
    let serve_service_name = service::serve_service_name(&name);
    let serve_service =
        get_opt(&services, &serve_service_name).await?.filter(|s| owned_by(s.metadata.owner_references.as_ref(), &uid));

    if os.metadata.deletion_timestamp.is_some() {
        if has_finalizer(os.as_ref()) {
            for cluster in &mine {
                delete_quietly(&clusters, &cluster.name_any()).await?;
            }
            if serve_service.is_some() {
                delete_quietly(&services, &serve_service_name).await?;
            }
            remove_finalizer(&serve_services, os.as_ref()).await?;
            tracing::info!("service {namespace}/{name}: deleted its clusters and serve Service");
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer(os.as_ref()) {
        add_finalizer(&serve_services, os.as_ref()).await?;
    }

    let exclude_head = os.spec.exclude_head_pod_from_serve_svc.unwrap_or(false);
    let mut heads = std::collections::BTreeMap::new();
    let mut observed = ServiceObserved {
        now_s: jiff::Timestamp::now().as_second(),
        now: now_rfc3339(),
        serve_service_cluster: serve_service
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.get(CLUSTER_LABEL).cloned()),
        ..Default::default()
    };
    for cluster in mine.iter().filter(|c| c.metadata.deletion_timestamp.is_none()) {
        let annotations = cluster.metadata.annotations.clone().unwrap_or_default();
        let status = cluster.status.clone().unwrap_or_default();
        let head = reach_head(&ctx, &namespace, cluster).await?;
        let config_hash = annotations.get(service::SERVE_CONFIG_ANNOTATION).cloned();
        let ready = status.state.as_deref() == Some("ready") && head.is_some();
        let applications = match (&head, &config_hash) {
            (Some(head), Some(_)) if ready => Some(ctx.head.serve_applications(head).await.map_err(|e| e.to_string())),
            _ => None,
        };
        observed.clusters.push(ServeClusterView {
            name: cluster.name_any(),
            spec_hash: annotations.get(service::CLUSTER_HASH_ANNOTATION).cloned().unwrap_or_default(),
            config_hash,
            delete_after_s: annotations.get(service::DELETE_AFTER_ANNOTATION).and_then(|v| v.parse().ok()),
            ready,
            failed: (status.state.as_deref() == Some("failed")).then(|| status.reason.clone().unwrap_or_default()),
            serve_pods: serve_pods(cluster, exclude_head),
            applications,
        });
        if let Some(head) = head {
            heads.insert(cluster.name_any(), head);
        }
    }

    let plan = service::plan(&os, &observed);
    let mut status = plan.status.clone();
    if let Some(cluster) = &plan.create_cluster {
        match clusters.create(&PostParams::default(), cluster).await {
            Ok(_) => tracing::info!("service {namespace}/{name}: made cluster {}", cluster.name_any()),
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (cluster, config, hash) in &plan.deploy_config {
        let Some(head) = heads.get(cluster) else { continue };
        match ctx.head.put_serve_config(head, config).await {
            Ok(()) => {
                annotate(&clusters, cluster, service::SERVE_CONFIG_ANNOTATION, Some(hash.clone())).await?;
                tracing::info!("service {namespace}/{name}: deployed the Serve config to cluster {cluster}");
            }
            // Not deployed: said in the status, tried again next poll.
            Err(e) => status.message = Some(format!("could not deploy the Serve config to cluster {cluster}: {e}")),
        }
    }
    for (cluster, at) in &plan.retire {
        annotate(&clusters, cluster, service::DELETE_AFTER_ANNOTATION, Some(at.to_string())).await?;
    }
    for cluster in &plan.keep {
        annotate(&clusters, cluster, service::DELETE_AFTER_ANNOTATION, None).await?;
    }
    for cluster in &plan.delete_clusters {
        delete_quietly(&clusters, cluster).await?;
        tracing::info!("service {namespace}/{name}: deleted cluster {cluster}, which no longer serves");
    }
    if let Some(wanted) = &plan.serve_service {
        match &serve_service {
            None => match services.create(&PostParams::default(), wanted).await {
                Ok(_) => {}
                Err(e) if is_conflict(&e) => {
                    status.message = Some(format!(
                        "Service {serve_service_name} exists and was not made by this OxrayService; delete it"
                    ));
                }
                Err(e) => return Err(e.into()),
            },
            Some(existing) => {
                let old = serde_json::to_value(&existing.spec).map_err(ReconcileError::EncodeStatus)?;
                let new = serde_json::to_value(&wanted.spec).map_err(ReconcileError::EncodeStatus)?;
                let patch = json!({"spec": {
                    "selector": merge_patch(&old["selector"], &new["selector"]),
                    "ports": new["ports"],
                }});
                services.patch(&serve_service_name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
        }
        let to = wanted.spec.as_ref().and_then(|s| s.selector.as_ref()).and_then(|s| s.get(CLUSTER_LABEL));
        tracing::info!("service {namespace}/{name}: {serve_service_name} now routes to cluster {to:?}");
    }
    patch_status(&serve_services, &name, os.status.as_ref(), &status).await?;
    Ok(Action::requeue(ctx.settings.poll))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_patch_nulls_what_went_away() {
        let old = json!({"state": "pending", "reason": "waiting", "head": {"podIp": "1.2.3.4", "address": "a"}});
        let new = json!({"state": "ready", "head": {"address": "a"}});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"state": "ready", "reason": null, "head": {"podIp": null, "address": "a"}})
        );
    }
}
