//! `oxray-operator`: runs the controllers (`run`), prints the CRDs (`crds`), or
//! renders a cluster's objects as the operator would create them (`render`; for an
//! `OxrayService`, its first cluster's, and the Serve config it would deploy there),
//! for `podman kube play` or a look before applying.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::ByteString;
use oxray_operator::cluster::{HEAD_ADDRESS_ENV, Parts};
use oxray_operator::controller::{self, HeadVia, Settings};
use oxray_operator::crd::{OxrayCluster, OxrayService};
use oxray_operator::spec;
use serde::Serialize;
use std::io::Write;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "oxray-operator", about = "The oxray Kubernetes operator: OxrayCluster, OxrayJob and OxrayService")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch OxrayClusters, OxrayJobs and OxrayServices and reconcile them (in-cluster config, else ~/.kube/config or KUBECONFIG).
    Run {
        /// Only this namespace (default: all; the Helm chart's RBAC decides what is allowed).
        #[arg(long, env = "OXRAY_OPERATOR_NAMESPACE")]
        namespace: Option<String>,
        /// How to reach a cluster's head: its Service's DNS name, or the head pod's IP.
        #[arg(long, value_enum, default_value = "service", env = "OXRAY_OPERATOR_HEAD_VIA")]
        head_via: HeadVia,
        /// Seconds between looks at an autoscaling cluster or a running job.
        #[arg(long, default_value_t = 5.0)]
        poll_seconds: f64,
    },
    /// Print the CustomResourceDefinitions (YAML).
    Crds,
    /// Print the Secret and pods the operator would make for an OxrayCluster manifest, or for the
    /// first cluster of an OxrayService (YAML; the manifest's ConfigMaps are passed through).
    Render {
        /// The OxrayCluster or OxrayService manifest (other documents in it: ConfigMaps only).
        #[arg(short = 'f', long)]
        file: std::path::PathBuf,
        /// The cluster token (default: a new random one).
        #[arg(long, env = "OXRAY_RENDER_TOKEN")]
        token: Option<String>,
        /// Where workers find the head, instead of the Service's DNS name (a runtime without Services).
        #[arg(long)]
        head_address: Option<String>,
        /// Workers per group, instead of `replicas`.
        #[arg(long)]
        workers: Option<usize>,
        /// Every container's image, instead of the templates'.
        #[arg(long)]
        image: Option<String>,
        /// Publish the head's Jobs API and dashboard on this host port (`hostPort`).
        #[arg(long)]
        publish_dashboard: Option<u16>,
        /// An OxrayService: publish the head's Serve HTTP port on this host port (`hostPort`).
        #[arg(long)]
        publish_serve: Option<u16>,
        /// An OxrayService: write the Serve config the operator would PUT to the head here (JSON).
        #[arg(long)]
        serve_config: Option<std::path::PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { namespace, head_via, poll_seconds } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
                )
                .init();
            if !(poll_seconds.is_finite() && poll_seconds > 0.0) {
                anyhow::bail!("--poll-seconds is {poll_seconds}; expected a number of seconds above 0");
            }
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(async move {
                let client = kube::Client::try_default()
                    .await
                    .context("no Kubernetes API to talk to: run in a pod with a service account, or set KUBECONFIG")?;
                let settings = Settings { namespace, head_via, poll: Duration::from_secs_f64(poll_seconds) };
                controller::run(client, settings).await
            })
        }
        Command::Crds => {
            let mut out = std::io::stdout().lock();
            out.write_all(oxray_operator::crd::crds_yaml()?.as_bytes())?;
            Ok(())
        }
        Command::Render {
            file,
            token,
            head_address,
            workers,
            image,
            publish_dashboard,
            publish_serve,
            serve_config,
        } => render(
            &file,
            &RenderOptions { token, head_address, workers, image, publish_dashboard, publish_serve, serve_config },
        ),
    }
}

fn write_yaml(out: &mut impl Write, value: &impl Serialize) -> anyhow::Result<()> {
    writeln!(out, "---")?;
    out.write_all(serde_saphyr::to_string(value)?.as_bytes())?;
    Ok(())
}

/// `render`'s changes for a runtime without the API server.
struct RenderOptions {
    token: Option<String>,
    head_address: Option<String>,
    workers: Option<usize>,
    image: Option<String>,
    publish_dashboard: Option<u16>,
    publish_serve: Option<u16>,
    serve_config: Option<std::path::PathBuf>,
}

fn render(file: &std::path::Path, options: &RenderOptions) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).with_context(|| format!("{} is not YAML", file.display()))?;
    let mut passed_through = Vec::new();
    let mut cluster = None;
    let mut serve = None;
    for doc in docs {
        match doc["kind"].as_str() {
            Some("OxrayCluster") => cluster = Some(serde_json::from_value::<OxrayCluster>(doc)?),
            Some("OxrayService") => {
                let service: OxrayService = serde_json::from_value(doc)?;
                let (config, port) = oxray_operator::service::serve_config(&service)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                let plan = oxray_operator::service::plan(&service, &Default::default());
                cluster = Some(plan.create_cluster.context("the service plans no cluster")?);
                serve = Some((config, port));
            }
            Some("ConfigMap") => passed_through.push(doc),
            other => anyhow::bail!(
                "{}: a {other:?} document; render takes an OxrayCluster or an OxrayService (and ConfigMaps)",
                file.display()
            ),
        }
    }
    let cluster = cluster.with_context(|| format!("{} has no OxrayCluster or OxrayService", file.display()))?;
    if let (Some(path), Some((config, _))) = (&options.serve_config, &serve) {
        std::fs::write(path, serde_json::to_vec_pretty(config)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let name = cluster.metadata.name.clone().context("the manifest has no metadata.name")?;
    let namespace = cluster.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
    let checked = spec::check(&name, &cluster.spec).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let parts = Parts::new(&cluster, &name, &namespace, &checked);
    let token = options.token.clone().unwrap_or_else(|| hex::encode(rand::random::<[u8; 32]>()));
    let mut out = std::io::stdout().lock();
    // Runtimes without the API server's conversion want `data` (base64), not `stringData`.
    let mut secret = parts.secret(&token);
    secret.data =
        secret.string_data.take().map(|d| d.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect());
    let mut head = parts.head_pod();
    if let Some(port) = options.publish_dashboard
        && let Some(ports) = head.spec.as_mut().and_then(|s| s.containers[0].ports.as_mut())
        && let Some(dashboard) = ports.iter_mut().find(|p| p.container_port == i32::from(checked.dashboard_port))
    {
        dashboard.host_port = Some(i32::from(port));
    }
    if let (Some(host_port), Some((_, serve_port))) = (options.publish_serve, &serve)
        && let Some(container) = head.spec.as_mut().and_then(|s| s.containers.first_mut())
    {
        container.ports.get_or_insert_with(Vec::new).push(k8s_openapi::api::core::v1::ContainerPort {
            name: Some("serve".to_string()),
            container_port: *serve_port,
            host_port: Some(i32::from(host_port)),
            protocol: Some("TCP".to_string()),
            ..Default::default()
        });
    }
    let mut pods = vec![head];
    for group in &checked.groups {
        let count = options.workers.unwrap_or(group.replicas as usize);
        for index in 0..count {
            pods.push(parts.worker_pod(group, index));
        }
    }
    for pod in &mut pods {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let Some(spec) = pod.spec.as_mut() else { continue };
        own_empty_dirs(spec, &pod_name);
        open_volumes(spec);
        // podman restarts init containers that exited under `Always`, so they never complete.
        spec.restart_policy.get_or_insert_with(|| "OnFailure".to_string());
        for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            if let Some(image) = &options.image {
                container.image = Some(image.clone());
            }
            if let Some(address) = &options.head_address
                && let Some(var) = container.env.iter_mut().flatten().find(|e| e.name == HEAD_ADDRESS_ENV)
            {
                var.value = Some(address.clone());
            }
            // Without Services the declared ports say nothing, and podman would publish each on the host:
            // keep only what is published on purpose.
            if let Some(ports) = container.ports.as_mut() {
                ports.retain(|p| p.host_port.is_some());
            }
            // Runtimes such as podman have no downward API for the pod's IP: the command falls back to `hostname -i`.
            if let Some(env) = container.env.as_mut() {
                env.retain(|e| {
                    e.value_from
                        .as_ref()
                        .and_then(|v| v.field_ref.as_ref())
                        .is_none_or(|f| f.field_path != "status.podIP")
                });
            }
        }
    }
    // k8s-openapi writes each object's `apiVersion` and `kind`.
    for doc in &passed_through {
        write_yaml(&mut out, doc)?;
    }
    write_yaml(&mut out, &secret)?;
    for pod in &pods {
        write_yaml(&mut out, pod)?;
    }
    Ok(())
}

/// podman makes an emptyDir a volume named as in the manifest, shared by every pod that names it
/// so: prefix each with its pod's name, as each pod has its own in Kubernetes.
fn own_empty_dirs(spec: &mut k8s_openapi::api::core::v1::PodSpec, pod: &str) {
    let names: Vec<String> =
        spec.volumes.iter().flatten().filter(|v| v.empty_dir.is_some()).map(|v| v.name.clone()).collect();
    for volume in spec.volumes.iter_mut().flatten().filter(|v| names.contains(&v.name)) {
        volume.name = format!("{pod}-{}", volume.name);
    }
    let containers = spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten());
    for mount in containers.flat_map(|c| c.volume_mounts.iter_mut().flatten()) {
        if names.contains(&mount.name) {
            mount.name = format!("{pod}-{}", mount.name);
        }
    }
}

/// Kubernetes makes an emptyDir writable by all; podman makes its volumes root's.
/// The pod's user must write the object store's arena in the `/dev/shm` volume
/// (and shared storage), so a first init container, as root, opens the oxray
/// container's emptyDir and claim mounts (sticky, as /dev/shm is).
fn open_volumes(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    use k8s_openapi::api::core::v1::{Container, SecurityContext};
    let Some(main) = spec.containers.first() else { return };
    let writable = |name: &str| {
        spec.volumes
            .iter()
            .flatten()
            .any(|v| v.name == name && (v.empty_dir.is_some() || v.persistent_volume_claim.is_some()))
    };
    let mounts: Vec<_> = main.volume_mounts.iter().flatten().filter(|m| writable(&m.name)).cloned().collect();
    if mounts.is_empty() {
        return;
    }
    // No shell: the paths are the manifest's, passed as arguments.
    let mut command = vec!["chmod".to_string(), "1777".to_string()];
    command.extend(mounts.iter().map(|m| m.mount_path.clone()));
    let opener = Container {
        name: "open-volumes".to_string(),
        image: main.image.clone(),
        command: Some(command),
        security_context: Some(SecurityContext { run_as_user: Some(0), ..Default::default() }),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    spec.init_containers.get_or_insert_with(Vec::new).insert(0, opener);
}
