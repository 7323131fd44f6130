//! The operator's errors, and what a user sees of each.
//!
//! - [`SpecError`]: an `OxrayCluster` or `OxrayJob` spec that cannot run as
//!   written. Its message names the field, the value and what was expected;
//!   the resource fails with it (a status, never a crash loop) until the spec
//!   changes.
//! - [`HeadApiError`]: a call to a cluster's head that failed. It does not fail
//!   the reconcile: the status says why, and the next poll asks again.
//! - [`DemandError`]: why the autoscaler has no demand from the head this
//!   round (a failed call, or nothing to call with yet).
//! - [`ReconcileError`]: a reconcile step that failed; the controller logs it
//!   and retries.
//!
//! Every message is whole on one line, cause included, because a status
//! shows only that line; none also returns its cause from `source()`.
//! The methods at the end are the one place that words an error for a
//! resource's status: cluster.rs, job.rs and controller.rs show what they
//! return.

use hyper::{Method, StatusCode};
use std::time::Duration;

/// A spec that cannot run as written.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    // Any part of a spec.
    #[error("{at}.{key} is not a field oxray's operator supports (README, Kubernetes, lists what is); remove it")]
    UnknownField { at: String, key: String },
    #[error(
        "{field} {name:?} is not usable: expected at most {max} lowercase letters, digits and '-', \
         starting with a letter and not ending with '-' (it names pods and a Service)"
    )]
    UnusableName { field: String, name: String, max: usize },

    // A role's pod template (`template` is the field, e.g. `headGroupSpec.template`).
    #[error("{template}.spec.containers is empty; expected the oxray container first")]
    NoContainer { template: String },
    #[error("{template}.spec.containers[0].image is not set; expected an oxray image")]
    NoImage { template: String },
    #[error(
        "{template}.spec.containers[0] sets command or args, but the operator runs `oxray start` there; \
         put setup steps in an initContainer and options in rayStartParams"
    )]
    CommandOrArgsSet { template: String },
    /// A CPU or GPU limit (or request) that is not a Kubernetes quantity; `role` is e.g. `headGroupSpec`.
    #[error("{role}.template's first container asks for {resource} {quantity:?}; expected a quantity like 2 or 500m")]
    BadQuantity { role: String, resource: String, quantity: String },

    // A role's `rayStartParams` (`params` is the field, e.g. `workerGroupSpecs[0].rayStartParams`).
    #[error("{params} sets {key:?}, which the operator sets itself: {why}")]
    ParamTheOperatorSets { params: String, key: String, why: &'static str },
    #[error("{params}.block is {value:?}; pods always run blocking, expected \"true\"")]
    NotBlocking { params: String, value: String },
    #[error(
        "{params} has {key:?}, which `oxray start` for {role} does not take; expected one of {}, block",
        .allowed.join(", ")
    )]
    UnknownParam { params: String, key: String, role: &'static str, allowed: Vec<&'static str> },
    #[error("{params}.{key} is {value:?}; expected {expected}")]
    BadParam { params: String, key: String, value: String, expected: &'static str },
    #[error("{params}.resources is {value:?}; expected a JSON object of numbers ({error})")]
    ResourcesNotJson { params: String, value: String, error: serde_json::Error },
    #[error(
        "{params}.resources sets {name:?}; expected only custom resources (use num-cpus/num-gpus, or the \
         container's limits)"
    )]
    BuiltInResource { params: String, name: String },

    // The head.
    #[error("headGroupSpec.serviceType is {0:?}; expected ClusterIP, NodePort or LoadBalancer")]
    UnknownServiceType(String),
    #[error(
        "headGroupSpec.rayStartParams sets tls-cert, so the head's Jobs API speaks HTTPS only; set \
         spec.tls.caSecretName to a Secret holding the CA that signed it (key ca.crt, or spec.tls.caKey), \
         which the operator verifies the head with"
    )]
    HttpsHeadWithoutCa,
    #[error(
        "spec.tls is set but headGroupSpec.rayStartParams has no tls-cert, so the head speaks plain HTTP \
         and nothing would use the CA; add tls-cert, tls-key and tls-ca, or remove spec.tls"
    )]
    CaWithoutHttpsHead,
    #[error("spec.tls names Secret {secret:?} key {key:?}; expected both non-empty")]
    EmptyCaRef { secret: String, key: String },

    // The autoscaler.
    /// A KubeRay option for the autoscaler's sidecar (`image`, `resources`, `env`).
    #[error(
        "autoscalerOptions.{0} is not supported: oxray's autoscaler runs in the operator, not as a sidecar in \
         the head pod; remove it"
    )]
    SidecarOption(&'static str),
    #[error(
        "autoscalerOptions.upscalingMode {0:?} is not supported; oxray adds the workers the demand needs at \
         once (KubeRay's \"Default\"): remove it or set \"Default\""
    )]
    UnsupportedUpscalingMode(String),
    #[error("autoscalerOptions.idleTimeoutSeconds is {0}; expected 0 or more seconds")]
    NegativeIdleTimeout(i32),

    // Worker groups (`index` in `workerGroupSpecs`).
    #[error("workerGroupSpecs[{index}].groupName {name:?} is used twice; names must differ")]
    GroupNameUsedTwice { index: usize, name: String },
    #[error(
        "workerGroupSpecs[{index}] ({name}) says neither rayStartParams num-cpus nor a CPU limit or request on \
         its first container, so the autoscaler can't tell what a new worker offers: set one"
    )]
    WorkerResourcesUnknown { index: usize, name: String },
    #[error("workerGroupSpecs[{index}]: minReplicas {min} and maxReplicas {max} must not be negative")]
    NegativeReplicaBounds { index: usize, min: i32, max: i32 },
    #[error("workerGroupSpecs[{index}]: minReplicas {min} is above maxReplicas {max}; expected min <= max")]
    MinAboveMax { index: usize, min: i32, max: i32 },
    #[error("workerGroupSpecs[{index}].replicas is {replicas}; expected 0 or more")]
    NegativeReplicas { index: usize, replicas: i32 },

    // An `OxrayJob`.
    #[error("spec.entrypoint is empty; expected the command the job runs, e.g. `python train.py`")]
    EmptyEntrypoint,
    #[error(
        "spec.submissionMode {0:?} is not supported: the operator submits through the Jobs API \
         (\"HTTPMode\"), without a submitter pod; remove it or set \"HTTPMode\""
    )]
    UnsupportedSubmissionMode(String),
    #[error(
        "spec.submitterPodTemplate is not supported: the operator submits through the Jobs API without a \
         submitter pod; remove it"
    )]
    SubmitterPodTemplate,
    #[error("spec sets both rayClusterSpec and clusterSelector; expected one")]
    TwoClusters,
    #[error(
        "spec has neither rayClusterSpec nor a clusterSelector naming a cluster ({}: <name>); set one",
        crate::job::SELECTOR_KEYS[0]
    )]
    NoCluster,
    #[error("spec.runtimeEnvYAML is not YAML: {0}")]
    RuntimeEnvNotYaml(serde_saphyr::Error),
    /// `runtimeEnvYAML` parsed, as this value, which is not a mapping.
    #[error("spec.runtimeEnvYAML is {0}; expected a mapping such as `pip: [requests]`")]
    RuntimeEnvNotMapping(serde_json::Value),
    // An `OxrayService`.
    #[error("spec.serveConfigV2 is not set; expected Ray Serve's config (ServeDeploySchema) as YAML")]
    NoServeConfig,
    #[error("spec.serveConfigV2 is not YAML: {0}")]
    ServeConfigNotYaml(serde_saphyr::Error),
    /// `serveConfigV2` parsed, as this value, which is not a mapping.
    #[error("spec.serveConfigV2 is {0}; expected a mapping (Ray's ServeDeploySchema: applications, http_options)")]
    ServeConfigNotMapping(serde_json::Value),
    #[error(
        "spec.upgradeStrategy.type is {0:?}; expected NewCluster or None (NewClusterWithIncrementalUpgrade \
         shifts traffic through the Gateway API, which oxray's operator does not drive)"
    )]
    UnsupportedUpgradeStrategy(String),
    #[error("spec.entrypointResources {value:?} is not a JSON object: {error}")]
    EntrypointResourcesNotJson { value: String, error: serde_json::Error },
}

/// A call to a head that failed: `method` and `url` say which.
#[derive(Debug, thiserror::Error)]
pub enum HeadApiError {
    /// The request could not be sent or its answer not read (no route, refused, reset); `reason`
    /// is the transport's error with its causes.
    #[error("{method} {url}: {reason}")]
    Unreachable { method: Method, url: String, reason: String },
    #[error("{method} {url}: no answer in {} s", .deadline.as_secs())]
    NoAnswer { method: Method, url: String, deadline: Duration },
    /// The head answered with a status other than success; `body` is its text.
    #[error("{method} {url} answered {status}: {body}")]
    ErrorStatus { method: Method, url: String, status: StatusCode, body: String },
    /// A success whose body is not the `expected` reply.
    #[error("{method} {url}: the reply is not {expected}: {error}")]
    BadReply { method: Method, url: String, expected: &'static str, error: serde_json::Error },
}

impl HeadApiError {
    /// `Unreachable`, with `error` and each of its causes as the reason.
    pub(crate) fn unreachable(method: &Method, url: &str, error: &(dyn std::error::Error + 'static)) -> Self {
        let mut reason = error.to_string();
        let mut cause = error.source();
        while let Some(e) = cause {
            reason = format!("{reason}: {e}");
            cause = e.source();
        }
        Self::Unreachable { method: method.clone(), url: url.to_string(), reason }
    }
}

/// Why the autoscaler has no demand from the head this round; the workers stay as they are.
#[derive(Debug, thiserror::Error)]
pub enum DemandError {
    /// The operator reaches heads by pod IP, and the head pod has none.
    #[error("the head pod has no IP yet")]
    HeadPodHasNoIp,
    /// The cluster token's Secret (named here) holds no token.
    #[error("Secret {0} has no token")]
    NoToken(String),
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error(transparent)]
    Head(#[from] HeadApiError),
}

/// Why the CA of a TLS cluster's head (`spec.tls`) cannot be used: without it the operator
/// does not call the head at all.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("spec.tls.caSecretName names Secret {0}, which does not exist in the cluster's namespace; create it")]
    NoSecret(String),
    #[error("Secret {secret} has no key {key:?} (spec.tls.caKey); expected the CA certificate in PEM there")]
    NoKey { secret: String, key: String },
    #[error("Secret {secret} key {key:?} is not a usable CA certificate: {reason}")]
    Unusable { secret: String, key: String, reason: String },
}

impl CaError {
    /// A cluster's `status.reason` (and its `Ready` condition's message) while the CA cannot be used.
    pub fn cluster_reason(&self) -> String {
        format!("the head speaks HTTPS and the operator cannot verify it: {self}")
    }
}

/// A reconcile step that failed; the controller logs it and retries.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("encoding the status: {0}")]
    EncodeStatus(serde_json::Error),
    /// A job is to be submitted but the head's URL or the cluster token is not known.
    #[error("the cluster is ready but its head is not reachable")]
    HeadNotReachable,
}

// What the user sees: the status of the resource an error concerns.

impl SpecError {
    /// The reason of a cluster's `SpecValid` and `Ready` conditions while its spec is this
    /// (`SpecValid`'s message is the error's).
    pub fn condition_reason(&self) -> &'static str {
        "InvalidSpec"
    }

    /// The message of a cluster's `Ready` condition while its spec is this.
    pub fn ready_message(&self) -> &'static str {
        "the spec is not valid"
    }
}

impl DemandError {
    /// A cluster's `status.reason` (and its `Ready` condition's message) while the autoscaler
    /// cannot read the demand.
    pub fn cluster_reason(&self) -> String {
        format!("the autoscaler could not read the head's demand: {self}")
    }
}

impl HeadApiError {
    /// An `OxrayJob`'s `status.message` when the head could not say how its job is (asked again next poll).
    pub fn job_unread_message(&self) -> String {
        format!("could not ask the head about the job: {self}")
    }

    /// An `OxrayJob`'s `status.message` when its submission failed (tried again next poll).
    pub fn not_submitted_message(&self) -> String {
        format!("could not submit: {self}")
    }
}
