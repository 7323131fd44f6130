//! `oxray-operator`: runs the controllers (`run`), prints the CRDs (`crds`), or
//! renders a cluster's objects as the operator would create them (`render`),
//! for `podman kube play` or a look before applying.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::ByteString;
use oxray_operator::cluster::{Child, HEAD_ADDRESS_ENV, Parts};
use oxray_operator::controller::{self, HeadVia, Settings};
use oxray_operator::crd::OxrayCluster;
use oxray_operator::spec;
use serde::Serialize;
use std::io::Write;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "oxray-operator", about = "The oxray Kubernetes operator: OxrayCluster and OxrayJob")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch OxrayClusters and OxrayJobs and reconcile them (in-cluster config, else ~/.kube/config or KUBECONFIG).
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
    /// Print the Secret and pods the operator would make for an OxrayCluster manifest (YAML).
    Render {
        /// The OxrayCluster manifest.
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
            for crd in oxray_operator::crd::crds() {
                write_yaml(&mut out, &crd)?;
            }
            Ok(())
        }
        Command::Render { file, token, head_address, workers } => render(&file, token, head_address, workers),
    }
}

fn write_yaml(out: &mut impl Write, value: &impl Serialize) -> anyhow::Result<()> {
    writeln!(out, "---")?;
    out.write_all(serde_saphyr::to_string(value)?.as_bytes())?;
    Ok(())
}

fn render(
    file: &std::path::Path,
    token: Option<String>,
    head_address: Option<String>,
    workers: Option<usize>,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let cluster: OxrayCluster =
        serde_saphyr::from_str(&text).with_context(|| format!("{} is not an OxrayCluster manifest", file.display()))?;
    let name = cluster.metadata.name.clone().context("the manifest has no metadata.name")?;
    let namespace = cluster.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
    let checked = spec::check(&name, &cluster.spec).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let parts = Parts::new(&cluster, &name, &namespace, &checked);
    let token = token.unwrap_or_else(|| hex::encode(rand::random::<[u8; 32]>()));
    let mut out = std::io::stdout().lock();
    // Runtimes without the API server's conversion want `data` (base64), not `stringData`.
    let mut secret = parts.secret(&token);
    secret.data =
        secret.string_data.take().map(|d| d.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect());
    let mut children = vec![Child::Secret(Box::new(secret)), Child::Pod(Box::new(parts.head_pod()))];
    for group in &checked.groups {
        let count = workers.unwrap_or(group.replicas as usize);
        for index in 0..count {
            let mut pod = parts.worker_pod(group, index);
            if let Some(address) = &head_address
                && let Some(env) = pod.spec.as_mut().and_then(|s| s.containers[0].env.as_mut())
                && let Some(var) = env.iter_mut().find(|e| e.name == HEAD_ADDRESS_ENV)
            {
                var.value = Some(address.clone());
            }
            children.push(Child::Pod(Box::new(pod)));
        }
    }
    for child in children {
        match child {
            Child::Secret(s) => write_yaml(&mut out, &with_kind(&*s, "v1", "Secret")?)?,
            Child::Service(s) => write_yaml(&mut out, &with_kind(&*s, "v1", "Service")?)?,
            Child::Pod(p) => write_yaml(&mut out, &with_kind(&*p, "v1", "Pod")?)?,
        }
    }
    Ok(())
}

/// k8s-openapi leaves `apiVersion`/`kind` to the client; a manifest needs them.
fn with_kind(object: &impl Serialize, api_version: &str, kind: &str) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = serde_json::json!(api_version);
    value["kind"] = serde_json::json!(kind);
    Ok(value)
}
