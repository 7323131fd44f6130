//! A submitted job: its record (what is stored and what `JobDetails` shows),
//! its status and Ray's wording for each, and the submit request's checks.

use crate::packages::PackageError;
pub use oxray_rest::JobStatus;
use oxray_rest::{JobDetails, JobType};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

pub const MSG_PENDING: &str = "Job has not started yet. It may be waiting for resources (CPUs, GPUs, memory, \
     custom resources) to become available. It may be waiting for the runtime environment to be set up.";
pub const MSG_RUNNING: &str = "Job is currently running.";
pub const MSG_STOPPED: &str = "Job was intentionally stopped.";
pub const MSG_SUCCEEDED: &str = "Job finished successfully.";

#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub submission_id: String,
    pub entrypoint: String,
    pub status: JobStatus,
    pub message: String,
    pub error_type: Option<String>,
    /// Milliseconds since the epoch.
    pub start_time: u64,
    pub end_time: Option<u64>,
    pub metadata: Map<String, Value>,
    pub runtime_env: Map<String, Value>,
    pub driver_exit_code: Option<i32>,
    /// What the entrypoint reserves while it runs (`entrypoint_num_cpus` as
    /// `CPU`, ...); stored, not shown, as in Ray.
    pub resources: BTreeMap<String, f64>,
    /// The node (hex id) whose agent runs the entrypoint, when not the head's.
    pub node: Option<String>,
    /// What holds its entrypoint resources on that node (a placement group id, hex).
    pub group: Option<String>,
    /// Its run on that node's agent (unique per start), which stops and re-attaches name.
    pub run_id: Option<String>,
    /// The entrypoint's process (and process group) on the head's node, while it runs.
    pub pid: Option<u32>,
    /// That process's start time (clock ticks after boot), so a reused pid is never signalled.
    pub pid_start: Option<u64>,
}

impl JobRecord {
    /// The job has ended (`status` is terminal): when, why, and no process any more.
    pub fn end(&mut self, status: JobStatus, message: String, error_type: Option<&str>) {
        self.status = status;
        self.message = message;
        self.error_type = error_type.map(str::to_string);
        self.end_time = Some(oxray_rest::now_ms());
        self.pid = None;
        self.pid_start = None;
    }

    /// Ray's `JobDetails`; a browser sees `env_vars` values redacted.
    pub fn details(&self, redact: bool) -> JobDetails {
        let mut runtime_env = self.runtime_env.clone();
        if redact && let Some(Value::Object(vars)) = runtime_env.get_mut("env_vars") {
            for value in vars.values_mut() {
                *value = Value::String("<redacted>".into());
            }
        }
        JobDetails {
            job_type: JobType::Submission,
            job_id: None,
            submission_id: Some(self.submission_id.clone()),
            driver_info: None,
            status: self.status,
            entrypoint: self.entrypoint.clone(),
            message: self.message.clone(),
            error_type: self.error_type.clone(),
            start_time: self.start_time,
            end_time: self.end_time,
            metadata: self.metadata.clone(),
            runtime_env,
            driver_agent_http_address: None,
            driver_node_id: None,
            driver_exit_code: self.driver_exit_code,
        }
    }

    /// What the store keeps (the details plus the process id).
    pub fn to_stored(&self) -> String {
        let mut value = serde_json::to_value(self.details(false)).expect("JobDetails is plain data");
        value["pid"] = json!(self.pid);
        value["pid_start"] = json!(self.pid_start);
        value["entrypoint_resources_held"] = json!(self.resources);
        value["oxray_node"] = json!(self.node);
        value["oxray_group"] = json!(self.group);
        value["oxray_run_id"] = json!(self.run_id);
        value.to_string()
    }

    pub fn from_stored(text: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(text).ok()?;
        let string = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        let object = |key: &str| value.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
        Some(JobRecord {
            submission_id: string("submission_id")?,
            entrypoint: string("entrypoint")?,
            status: JobStatus::parse(&string("status")?)?,
            message: string("message").unwrap_or_default(),
            error_type: string("error_type"),
            start_time: value.get("start_time").and_then(Value::as_u64).unwrap_or(0),
            end_time: value.get("end_time").and_then(Value::as_u64),
            metadata: object("metadata"),
            runtime_env: object("runtime_env"),
            driver_exit_code: value.get("driver_exit_code").and_then(Value::as_i64).map(|c| c as i32),
            resources: value
                .get("entrypoint_resources_held")
                .and_then(Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
                .unwrap_or_default(),
            node: string("oxray_node"),
            group: string("oxray_group"),
            run_id: string("oxray_run_id"),
            pid: value.get("pid").and_then(Value::as_u64).map(|p| p as u32),
            pid_start: value.get("pid_start").and_then(Value::as_u64),
        })
    }
}

/// `raysubmit_` and 16 characters from letters and digits without look-alikes, as Ray makes them.
pub fn new_submission_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ123456789";
    let mut id = String::from("raysubmit_");
    for _ in 0..16 {
        id.push(ALPHABET[rand::random_range(0..ALPHABET.len())] as char);
    }
    id
}

/// The longest submission id accepted.
pub const MAX_SUBMISSION_ID_LEN: usize = 255;

/// The longest entrypoint accepted: Linux passes one argument of at most 128 KiB to
/// `/bin/sh -c` (`MAX_ARG_STRLEN`), so a longer command could never start.
pub const MAX_ENTRYPOINT_BYTES: usize = 128 * 1024 - 1;

/// Whether `id` may name a job: 1 to 255 letters, digits, `-`, `_` and `.` (Ray's own ids,
/// `raysubmit_...`, look so). Ids end up in URLs, file names and pages, so nothing else is let in.
pub fn is_valid_submission_id(id: &str) -> bool {
    (1..=MAX_SUBMISSION_ID_LEN).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && id != "."
        && id != ".."
}

fn check_submission_id(key: &str, id: &str) -> Result<(), SubmitError> {
    if is_valid_submission_id(id) {
        return Ok(());
    }
    Err(SubmitError::InvalidId { key: key.to_string(), id: id.to_string() })
}

/// Environment variables a process can be given: a name without `=` or NUL, a value without NUL.
fn check_env_vars(vars: &Map<String, Value>) -> Result<(), SubmitError> {
    for (name, value) in vars {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(SubmitError::EnvVarName { name: name.clone() });
        }
        if value.as_str().is_some_and(|v| v.contains('\0')) {
            return Err(SubmitError::EnvVarNul { name: name.clone() });
        }
    }
    Ok(())
}

/// Ray's `RuntimeEnvConfig`: `setup_timeout_seconds` (a whole number of seconds, or -1 for no
/// limit; 600 when not given) and `eager_install` (true: a job's setup always runs before it starts).
fn check_setup_config(config: &Value) -> Result<(), SubmitError> {
    let fields = config
        .as_object()
        .ok_or_else(|| SubmitError::NotAnObject { what: "runtime_env[\"config\"]", got: config.clone() })?;
    for (name, value) in fields {
        match name.as_str() {
            "setup_timeout_seconds" => match value.as_i64() {
                Some(seconds) if seconds == -1 || seconds > 0 => {}
                _ => return Err(SubmitError::SetupTimeout { got: value.clone() }),
            },
            "eager_install" if value == &Value::Bool(true) || value.is_null() => {}
            "eager_install" => return Err(SubmitError::EagerInstall { got: value.clone() }),
            other => return Err(SubmitError::ConfigKey { key: other.to_string() }),
        }
    }
    Ok(())
}

/// Why a submit body is refused (a 400), in the words Ray's users see; `what` names the field.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the request body is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("the request body must be a JSON object such as {{\"entrypoint\": \"python script.py\"}}")]
    BodyNotAnObject,
    #[error("unknown field {field:?}; expected entrypoint, submission_id, runtime_env, metadata or entrypoint_*")]
    UnknownField { field: String },
    #[error("{what} must be a string, got {got}")]
    NotAString { what: String, got: Value },
    #[error("{what} must be a JSON object, got {got}")]
    NotAnObject { what: &'static str, got: Value },
    #[error("{what} must be a JSON object of strings, got {got}")]
    NotStrings { what: String, got: Value },
    #[error("{what}[{key:?}] must be a string, got {got}")]
    ValueNotAString { what: &'static str, key: String, got: Value },
    #[error(
        "{key}={} is not a valid id: expected 1 to {MAX_SUBMISSION_ID_LEN} letters, digits, '-', '_' or '.'",
        shown_id(.id)
    )]
    InvalidId { key: String, id: String },
    #[error("entrypoint is required (the shell command to run)")]
    NoEntrypoint,
    #[error("entrypoint is empty: expected a shell command such as \"python script.py\"")]
    EmptyEntrypoint,
    #[error(
        "entrypoint is {len} bytes: expected at most {MAX_ENTRYPOINT_BYTES} (the longest command a shell can be \
         given); put a long command in a script in the working_dir"
    )]
    EntrypointTooLong { len: usize },
    #[error("entrypoint holds a NUL byte, which no command line can hold")]
    EntrypointNul,
    #[error("{what} must be a number >= 0, got {got}")]
    Amount { what: String, got: Value },
    #[error("entrypoint_memory must be a whole number of bytes >= 0, got {got}")]
    Memory { got: Value },
    #[error("entrypoint_resources must be a JSON object of resource names to numbers, got {got}")]
    ResourcesNotAnObject { got: Value },
    #[error(
        "entrypoint_resources may not contain {name:?}: use entrypoint_num_cpus, entrypoint_num_gpus or \
         entrypoint_memory"
    )]
    ReservedResource { name: String },
    #[error("{key}={got} is not supported by oxray yet: nodes carry no labels to select on")]
    LabelSelector { key: String, got: Value },
    #[error("runtime_env[{key:?}] is not supported by oxray yet (supported: {})", RUNTIME_ENV_KEYS.join(", "))]
    RuntimeEnvNotYet { key: String },
    #[error("runtime_env has an unknown key {key:?}; expected one of {}", RUNTIME_ENV_KEYS.join(", "))]
    RuntimeEnvUnknown { key: String },
    #[error("runtime_env[\"py_modules\"] must be a list of strings, got {got}")]
    PyModulesNotAList { got: Value },
    #[error("runtime_env[\"py_modules\"] entries must be strings, got {got}")]
    PyModuleNotAString { got: Value },
    #[error("{what} {uri:?}: {source}")]
    Package { what: &'static str, uri: String, source: PackageError },
    #[error(
        "{what} {uri:?} is not supported: expected an uploaded package (gcs://...), an absolute path on the head, \
         or s3://<bucket>/<key>.zip"
    )]
    Location { what: &'static str, uri: String },
    #[error(
        "runtime_env[\"excludes\"] applies to an uploaded working_dir; a working_dir that is a directory on the \
         head is used as it is (upload it from the client instead)"
    )]
    ExcludesOnHead,
    #[error(
        "runtime_env[\"pip\"] packages must be a list of requirement strings or the absolute path of a \
         requirements file on the head, got {got}"
    )]
    PipPackages { got: Value },
    #[error(
        "runtime_env[\"pip\"][\"pip_version\"]={got} is not supported by oxray: jobs install with the cluster's \
         own pip"
    )]
    PipVersion { got: Value },
    #[error(
        "runtime_env[\"pip\"][{key:?}]={got} is not valid: expected packages (a list), pip_check (a bool) or \
         pip_install_options (a list of strings)"
    )]
    PipField { key: String, got: Value },
    #[error("runtime_env[\"pip\"] needs \"packages\"")]
    PipNoPackages,
    #[error("runtime_env[\"env_vars\"] has the name {name:?}: expected a non-empty name without '=' or NUL")]
    EnvVarName { name: String },
    #[error("runtime_env[\"env_vars\"][{name:?}] holds a NUL byte, which no environment can hold")]
    EnvVarNul { name: String },
    #[error(
        "runtime_env[\"config\"][\"setup_timeout_seconds\"]={got}: expected a whole number of seconds above 0, \
         or -1 for no limit"
    )]
    SetupTimeout { got: Value },
    #[error(
        "runtime_env[\"config\"][\"eager_install\"]={got} is not supported by oxray: a job's runtime_env is \
         always set up before it starts (leave it out, or true)"
    )]
    EagerInstall { got: Value },
    #[error(
        "runtime_env[\"config\"] has {key:?}, which oxray does not apply; expected setup_timeout_seconds or \
         eager_install"
    )]
    ConfigKey { key: String },
}

/// An id as an error quotes it: its first 80 characters, and its length when it is longer.
fn shown_id(id: &str) -> String {
    let shown: String = id.chars().take(80).collect();
    let more = if id.chars().count() > 80 { format!("... ({} bytes)", id.len()) } else { String::new() };
    format!("{shown:?}{more}")
}

/// A checked `POST /api/jobs/` body.
#[derive(Debug, PartialEq)]
pub struct SubmitRequest {
    pub entrypoint: String,
    pub submission_id: Option<String>,
    pub runtime_env: Map<String, Value>,
    pub metadata: Map<String, Value>,
    /// `entrypoint_num_cpus/gpus/memory/resources` as scheduler resources (zeros left out).
    pub resources: BTreeMap<String, f64>,
}

/// A resource amount: a finite number, not negative.
fn amount(value: &Value, what: &str) -> Result<f64, SubmitError> {
    match value.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(SubmitError::Amount { what: what.to_string(), got: value.clone() }),
    }
}

/// Adds the `entrypoint_*` field `key` to `resources`.
fn entrypoint_resource(key: &str, value: &Value, resources: &mut BTreeMap<String, f64>) -> Result<(), SubmitError> {
    let mut add = |name: &str, x: f64| {
        if x > 0.0 {
            resources.insert(name.to_string(), x);
        }
    };
    match key {
        "entrypoint_num_cpus" => add("CPU", amount(value, key)?),
        "entrypoint_num_gpus" => add("GPU", amount(value, key)?),
        "entrypoint_memory" => {
            if value.as_u64().is_none() {
                return Err(SubmitError::Memory { got: value.clone() });
            }
            add("memory", amount(value, key)?)
        }
        "entrypoint_resources" => {
            let map = value.as_object().ok_or_else(|| SubmitError::ResourcesNotAnObject { got: value.clone() })?;
            for (name, x) in map {
                if matches!(name.as_str(), "CPU" | "GPU" | "memory") {
                    return Err(SubmitError::ReservedResource { name: name.clone() });
                }
                add(name, amount(x, &format!("entrypoint_resources[{name:?}]"))?);
            }
        }
        _ => {
            // entrypoint_label_selector: oxray nodes carry no labels yet.
            if value.as_object().is_some_and(|m| !m.is_empty()) {
                return Err(SubmitError::LabelSelector { key: key.to_string(), got: value.clone() });
            }
            if !value.is_object() {
                return Err(SubmitError::NotStrings { what: key.to_string(), got: value.clone() });
            }
        }
    }
    Ok(())
}

/// The `runtime_env` keys oxray applies to a job.
const RUNTIME_ENV_KEYS: &[&str] = &["working_dir", "py_modules", "pip", "env_vars", "excludes", "config"];
/// Keys Ray knows that oxray does not apply yet: refused, never ignored.
const RUNTIME_ENV_NOT_YET: &[&str] = &[
    "uv",
    "conda",
    "container",
    "image_uri",
    "py_executable",
    "java_jars",
    "worker_process_setup_hook",
    "nsight",
    "mpi",
];

/// A working_dir or py_modules entry oxray can fetch: a path on the head, an
/// uploaded `gcs://` package, or an `s3://` zip (or wheel, for py_modules).
fn check_location(uri: &str, what: &'static str) -> Result<(), SubmitError> {
    if uri.starts_with('/') {
        return Ok(());
    }
    if let Some(name) = uri.strip_prefix("gcs://") {
        return crate::packages::package_key("gcs", name).map(drop).map_err(|source| SubmitError::Package {
            what,
            uri: uri.to_string(),
            source,
        });
    }
    if let Some(rest) = uri.strip_prefix("s3://") {
        let archive = rest.ends_with(".zip") || (what == "py_modules entry" && rest.ends_with(".whl"));
        if rest.contains('/') && archive {
            return Ok(());
        }
    }
    Err(SubmitError::Location { what, uri: uri.to_string() })
}

/// Ray's `pip` forms: a list of requirements, a requirements file, or
/// `{"packages", "pip_check", "pip_version", "pip_install_options"}`.
fn check_pip(spec: &Value) -> Result<(), SubmitError> {
    let packages = |value: &Value| match value {
        Value::Array(items) if items.iter().all(Value::is_string) => Ok(()),
        Value::String(file) if file.starts_with('/') => Ok(()),
        other => Err(SubmitError::PipPackages { got: other.clone() }),
    };
    let Value::Object(fields) = spec else { return packages(spec) };
    for (key, value) in fields {
        match key.as_str() {
            "packages" => packages(value)?,
            "pip_check" if value.is_boolean() => {}
            "pip_install_options" if value.as_array().is_some_and(|a| a.iter().all(Value::is_string)) => {}
            "pip_version" if value.as_str().is_some_and(str::is_empty) => {}
            "pip_version" => return Err(SubmitError::PipVersion { got: value.clone() }),
            other => return Err(SubmitError::PipField { key: other.to_string(), got: value.clone() }),
        }
    }
    if !fields.contains_key("packages") {
        return Err(SubmitError::PipNoPackages);
    }
    Ok(())
}

fn string_map(value: &Value, what: &'static str) -> Result<Map<String, Value>, SubmitError> {
    let map =
        value.as_object().ok_or_else(|| SubmitError::NotStrings { what: what.to_string(), got: value.clone() })?;
    for (key, v) in map {
        if !v.is_string() {
            return Err(SubmitError::ValueNotAString { what, key: key.clone(), got: v.clone() });
        }
    }
    Ok(map.clone())
}

/// Checks a submit body as Ray's head does: unknown keys, wrong types and
/// options oxray does not enforce are an error naming them (a 400).
pub fn parse_submit(body: &[u8]) -> Result<SubmitRequest, SubmitError> {
    let value: Value = serde_json::from_slice(body).map_err(SubmitError::Json)?;
    let Value::Object(fields) = value else { return Err(SubmitError::BodyNotAnObject) };
    let mut request = SubmitRequest {
        entrypoint: String::new(),
        submission_id: None,
        runtime_env: Map::new(),
        metadata: Map::new(),
        resources: BTreeMap::new(),
    };
    let mut entrypoint = None;
    for (key, value) in &fields {
        if value.is_null() {
            continue; // null-valued keys are dropped, as Ray does
        }
        match key.as_str() {
            "entrypoint" => entrypoint = Some(value.as_str().ok_or_else(|| not_a_string("entrypoint", value))?),
            "submission_id" | "job_id" => {
                let id = value.as_str().ok_or_else(|| not_a_string(key, value))?;
                check_submission_id(key, id)?;
                request.submission_id = Some(id.to_string());
            }
            "metadata" => request.metadata = string_map(value, "metadata")?,
            "runtime_env" => {
                let env = value
                    .as_object()
                    .ok_or_else(|| SubmitError::NotAnObject { what: "runtime_env", got: value.clone() })?;
                for (name, setting) in env {
                    if name.starts_with('_') {
                        continue; // Ray's own bookkeeping (`_ray_commit`), not a user option
                    }
                    if RUNTIME_ENV_NOT_YET.contains(&name.as_str()) {
                        return Err(SubmitError::RuntimeEnvNotYet { key: name.clone() });
                    }
                    if !RUNTIME_ENV_KEYS.contains(&name.as_str()) {
                        return Err(SubmitError::RuntimeEnvUnknown { key: name.clone() });
                    }
                    match name.as_str() {
                        "working_dir" => {
                            let dir = setting
                                .as_str()
                                .ok_or_else(|| not_a_string("runtime_env[\"working_dir\"]", setting))?;
                            check_location(dir, "working_dir")?;
                        }
                        "py_modules" => {
                            let modules = setting
                                .as_array()
                                .ok_or_else(|| SubmitError::PyModulesNotAList { got: setting.clone() })?;
                            for module in modules {
                                let uri = module
                                    .as_str()
                                    .ok_or_else(|| SubmitError::PyModuleNotAString { got: module.clone() })?;
                                check_location(uri, "py_modules entry")?;
                            }
                        }
                        "pip" => check_pip(setting)?,
                        "env_vars" => check_env_vars(&string_map(setting, "runtime_env[\"env_vars\"]")?)?,
                        "config" => check_setup_config(setting)?,
                        _ => {}
                    }
                }
                // `excludes` shapes an upload (the client applies it); a directory on the head is used whole.
                let head_dir = env.get("working_dir").and_then(Value::as_str).is_some_and(|d| d.starts_with('/'));
                if head_dir && env.get("excludes").is_some_and(|e| e.as_array().is_some_and(|a| !a.is_empty())) {
                    return Err(SubmitError::ExcludesOnHead);
                }
                request.runtime_env = env.clone();
            }
            "entrypoint_num_cpus"
            | "entrypoint_num_gpus"
            | "entrypoint_memory"
            | "entrypoint_resources"
            | "entrypoint_label_selector" => entrypoint_resource(key, value, &mut request.resources)?,
            other => return Err(SubmitError::UnknownField { field: other.to_string() }),
        }
    }
    request.entrypoint = entrypoint.ok_or(SubmitError::NoEntrypoint)?.to_string();
    if request.entrypoint.trim().is_empty() {
        return Err(SubmitError::EmptyEntrypoint);
    }
    if request.entrypoint.len() > MAX_ENTRYPOINT_BYTES {
        return Err(SubmitError::EntrypointTooLong { len: request.entrypoint.len() });
    }
    if request.entrypoint.contains('\0') {
        return Err(SubmitError::EntrypointNul);
    }
    Ok(request)
}

fn not_a_string(what: &str, got: &Value) -> SubmitError {
    SubmitError::NotAString { what: what.to_string(), got: got.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit_with_id(id: &str) -> Result<SubmitRequest, SubmitError> {
        parse_submit(serde_json::json!({"entrypoint": "true", "submission_id": id}).to_string().as_bytes())
    }

    #[test]
    fn submission_ids_are_safe_in_urls_file_names_and_pages() {
        for good in ["raysubmit_abc123", "my-job.2", "a", &"x".repeat(255), &new_submission_id()] {
            assert_eq!(submit_with_id(good).unwrap().submission_id.as_deref(), Some(good));
        }
        // The stored XSS's id, a path, NUL, markup, spaces, and ids too long to ever delete.
        let attack = r"x\..\..\..\api\v0\logs\file?submission_id=other";
        for bad in [attack, "a/b", "nul\0id", "<script>", "two words", "", ".", "..", &"x".repeat(256)] {
            let e = submit_with_id(bad).unwrap_err().to_string();
            assert!(e.contains("submission_id=") && e.contains("not a valid id"), "{bad:?}: {e}");
        }
        let e = submit_with_id(&"y".repeat(100_000)).unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("100000 bytes"), "the error quotes a short part: {e}");
    }

    #[test]
    fn commands_and_variables_that_could_never_run_are_refused() {
        let long = serde_json::json!({"entrypoint": "x".repeat(2 << 20)}).to_string();
        assert!(parse_submit(long.as_bytes()).unwrap_err().to_string().contains("entrypoint is 2097152 bytes"));
        assert!(parse_submit(br#"{"entrypoint": "echo a\u0000b"}"#).unwrap_err().to_string().contains("NUL"));
        let key = br#"{"entrypoint": "x", "runtime_env": {"env_vars": {"A=B": "1"}}}"#;
        assert!(parse_submit(key).unwrap_err().to_string().contains(r#"the name "A=B""#));
        let value = br#"{"entrypoint": "x", "runtime_env": {"env_vars": {"A": "1\u00002"}}}"#;
        assert!(parse_submit(value).unwrap_err().to_string().contains("NUL"));
    }

    #[test]
    fn the_setup_config_takes_rays_timeout_and_refuses_what_it_would_not_apply() {
        let with = |config: &str| {
            parse_submit(format!(r#"{{"entrypoint": "x", "runtime_env": {{"config": {config}}}}}"#).as_bytes())
        };
        assert!(with(r#"{"setup_timeout_seconds": 30}"#).is_ok());
        assert!(with(r#"{"setup_timeout_seconds": -1, "eager_install": true}"#).is_ok());
        for (bad, named) in [
            (r#"{"setup_timeout_seconds": 0}"#, "setup_timeout_seconds"),
            (r#"{"setup_timeout_seconds": 1.5}"#, "setup_timeout_seconds"),
            (r#"{"eager_install": false}"#, "eager_install"),
            (r#"{"log_files": []}"#, "log_files"),
            ("3", "config"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(named), "{bad}: {e}");
        }
    }

    #[test]
    fn a_submit_body_is_checked() {
        let ok =
            parse_submit(br#"{"entrypoint": "echo hi", "runtime_env": {"env_vars": {"A": "1"}}, "metadata": null}"#)
                .unwrap();
        assert_eq!(ok.entrypoint, "echo hi");
        assert!(parse_submit(br#"{"entrypoint": "x", "bogus": 1}"#).unwrap_err().to_string().contains("\"bogus\""));
        assert!(parse_submit(br#"{"entrypoint": 3}"#).unwrap_err().to_string().contains("entrypoint must be a string"));
        assert!(parse_submit(br#"{"runtime_env": {}}"#).unwrap_err().to_string().contains("entrypoint is required"));
        let conda = parse_submit(br#"{"entrypoint": "x", "runtime_env": {"conda": "env"}}"#).unwrap_err().to_string();
        assert!(conda.contains("\"conda\"") && conda.contains("not supported"), "{conda}");
        assert!(parse_submit(br#"{"entrypoint": "x", "runtime_env": {"pip": ["a==1", "b"]}}"#).is_ok());
        let pip = br#"{"entrypoint": "x", "runtime_env": {"pip": {"packages": ["a"], "pip_check": false}}}"#;
        assert!(parse_submit(pip).is_ok());
        let version = br#"{"entrypoint": "x", "runtime_env": {"pip": {"packages": ["a"], "pip_version": "==23"}}}"#;
        assert!(parse_submit(version).unwrap_err().to_string().contains("pip_version"));
        assert!(
            parse_submit(br#"{"entrypoint": "x", "runtime_env": {"pip": "reqs.txt"}}"#)
                .unwrap_err()
                .to_string()
                .contains("absolute")
        );
        let modules = br#"{"entrypoint": "x", "runtime_env": {"py_modules": ["gcs://_ray_pkg_a.zip", "s3://b/m.whl", "/srv/m"]}}"#;
        assert!(parse_submit(modules).is_ok());
        let http = br#"{"entrypoint": "x", "runtime_env": {"py_modules": ["https://x/m.zip"]}}"#;
        assert!(parse_submit(http).unwrap_err().to_string().contains("https://x/m.zip"));
        let s3_dir = br#"{"entrypoint": "x", "runtime_env": {"working_dir": "s3://bucket/app.zip"}}"#;
        assert!(parse_submit(s3_dir).is_ok());
        let tarball = br#"{"entrypoint": "x", "runtime_env": {"working_dir": "s3://bucket/app.tar.gz"}}"#;
        assert!(parse_submit(tarball).unwrap_err().to_string().contains("s3://<bucket>/<key>.zip"));
        let held = parse_submit(
            br#"{"entrypoint": "x", "entrypoint_num_cpus": 2, "entrypoint_num_gpus": 0, "entrypoint_memory": 1024,
                 "entrypoint_resources": {"disk": 0.5}}"#,
        )
        .unwrap();
        let expected: BTreeMap<String, f64> =
            [("CPU", 2.0), ("memory", 1024.0), ("disk", 0.5)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        assert_eq!(held.resources, expected);
        assert!(
            parse_submit(br#"{"entrypoint": "x", "entrypoint_num_cpus": -1}"#)
                .unwrap_err()
                .to_string()
                .contains(">= 0")
        );
        let cpu = parse_submit(br#"{"entrypoint": "x", "entrypoint_resources": {"CPU": 1}}"#).unwrap_err().to_string();
        assert!(cpu.contains("entrypoint_num_cpus"), "{cpu}");
        let labels =
            parse_submit(br#"{"entrypoint": "x", "entrypoint_label_selector": {"a": "b"}}"#).unwrap_err().to_string();
        assert!(labels.contains("entrypoint_label_selector"), "{labels}");
        assert!(
            parse_submit(br#"{"entrypoint": "x", "metadata": {"a": 1}}"#).unwrap_err().to_string().contains("metadata")
        );
        let on_head = br#"{"entrypoint": "x", "runtime_env": {"working_dir": "/srv/app", "excludes": ["*.log"]}}"#;
        assert!(parse_submit(on_head).unwrap_err().to_string().contains("excludes"));
        let uploaded =
            br#"{"entrypoint": "x", "runtime_env": {"working_dir": "gcs://_ray_pkg_a.zip", "excludes": ["*.log"]}}"#;
        assert!(parse_submit(uploaded).is_ok());
    }

    #[test]
    fn records_round_trip_and_redact_for_browsers() {
        let mut env = Map::new();
        env.insert("env_vars".into(), json!({"SECRET": "s3cr3t"}));
        let record = JobRecord {
            submission_id: new_submission_id(),
            entrypoint: "echo".into(),
            status: JobStatus::Running,
            message: MSG_RUNNING.into(),
            error_type: None,
            start_time: 5,
            end_time: None,
            metadata: Map::new(),
            runtime_env: env,
            driver_exit_code: None,
            resources: [("CPU".to_string(), 1.5)].into_iter().collect(),
            node: Some("ab".repeat(16)),
            group: Some("cd".repeat(16)),
            run_id: Some("ef".repeat(16)),
            pid: Some(42),
            pid_start: Some(7),
        };
        assert_eq!(JobRecord::from_stored(&record.to_stored()), Some(record.clone()));
        assert_eq!(record.details(true).runtime_env["env_vars"]["SECRET"], "<redacted>");
        assert_eq!(record.details(false).runtime_env["env_vars"]["SECRET"], "s3cr3t");
        assert!(record.submission_id.starts_with("raysubmit_") && record.submission_id.len() == 26);
    }
}
