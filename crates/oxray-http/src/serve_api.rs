//! Ray Serve's REST API on the head (`/api/serve/applications/`), behind the token like every
//! route here, so Ray's own `serve deploy`/`status`/`config`/`shutdown` CLI drives an oxray head.
//! `GET` answers from what Serve's controller last reported to the head (Ray's
//! `ServeInstanceDetails`). `PUT` checks the config's shape (Ray's `ServeDeploySchema`: a 400
//! names what is wrong), then hands it to the cluster as an internal job, which starts Serve if it
//! is not running and gives the config to the controller; applications deploy asynchronously, as
//! in Ray. `DELETE` shuts Serve down the same way. A head that starts with a Serve checkpoint
//! kept in its redb (Serve ran when it went down) takes Serve back with a `recover` job.

use crate::error::HttpError;
use crate::state::StateSources;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use oxray_jobs::record::SubmitRequest;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};

/// The environment variable that carries a `PUT`'s config to the deploy job.
pub const CONFIG_ENV: &str = "OXRAY_SERVE_CONFIG";

pub(crate) fn routes(sources: StateSources) -> Router {
    Router::new().route("/api/serve/applications/", get(details).put(deploy).delete(shut_down)).with_state(sources)
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message).into_response()
}

/// Ray's reply when Serve is not running.
fn not_running() -> Value {
    json!({"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": null})
}

#[derive(serde::Deserialize)]
struct DetailsQuery {
    api_type: Option<String>,
}

async fn details(State(sources): State<StateSources>, Query(query): Query<DetailsQuery>) -> Response {
    let source = match query.api_type.as_deref() {
        None => None,
        Some(kind @ ("imperative" | "declarative")) => Some(kind.to_uppercase()),
        Some(other) => {
            return bad_request(format!("Got invalid API type: {other}. Expected one of imperative, declarative."));
        }
    };
    let Some(mut details) = sources.cluster.as_ref().and_then(|c| c.serve_details()) else {
        return axum::Json(not_running()).into_response();
    };
    if let (Some(source), Some(apps)) = (source, details.get_mut("applications").and_then(Value::as_object_mut)) {
        apps.retain(|_, app| app.get("source").and_then(Value::as_str) == Some(source.as_str()));
    }
    axum::Json(details).into_response()
}

async fn deploy(State(sources): State<StateSources>, body: Bytes) -> Result<Response, HttpError> {
    let config: Value = match serde_json::from_slice(&body) {
        Ok(config) => config,
        Err(e) => return Ok(bad_request(format!("The body is not JSON: {e}"))),
    };
    if let Err(message) = check_config(&config) {
        return Ok(bad_request(message));
    }
    submit(&sources, "apply", Some(config.to_string()))
}

async fn shut_down(State(sources): State<StateSources>) -> Result<Response, HttpError> {
    if sources.cluster.as_ref().and_then(|c| c.serve_details()).is_none() {
        return Ok(StatusCode::OK.into_response()); // nothing to shut down
    }
    submit(&sources, "shutdown", None)
}

/// A head started again with a Serve checkpoint kept from its previous run takes Serve back: the
/// `recover` job starts the controller (unless it outlived the head on another node), which
/// reads the checkpoint, adopts the replicas still running and starts the rest.
pub(crate) fn recover_on_start(sources: &StateSources) {
    if !sources.cluster.as_ref().is_some_and(|c| c.serve_checkpoint_kept()) {
        return;
    }
    if let Err(e) = submit(sources, "recover", None) {
        tracing::error!("could not start Serve's recovery after the head restarted: {e}");
    }
}

/// Runs `python -m oxray.serve._private.rest <command>` on the cluster as a job (it joins the
/// cluster as any job's driver does).
fn submit(sources: &StateSources, command: &str, config: Option<String>) -> Result<Response, HttpError> {
    let Some(jobs) = &sources.jobs else {
        return Ok(
            (StatusCode::SERVICE_UNAVAILABLE, "this server runs no jobs, so it cannot run Serve").into_response()
        );
    };
    let mut env_vars = Map::new();
    if let Some(config) = config {
        env_vars.insert(CONFIG_ENV.into(), Value::String(config));
    }
    let mut runtime_env = Map::new();
    runtime_env.insert("env_vars".into(), Value::Object(env_vars));
    let mut metadata = Map::new();
    metadata.insert("oxray_internal".into(), Value::String(format!("serve {command}")));
    jobs.submit(SubmitRequest {
        entrypoint: format!("python -m oxray.serve._private.rest {command}"),
        submission_id: None,
        runtime_env,
        metadata,
        resources: BTreeMap::new(),
    })?;
    Ok(StatusCode::OK.into_response())
}

/// Ray's `gRPCOptions` in a config: a port, import paths of servicer functions, a positive
/// timeout; reflection (Ray's default) is refused once a gRPC proxy would run, since none is served.
fn check_grpc(options: Option<&Value>) -> Result<(), String> {
    let Some(options) = options.filter(|o| !o.is_null()) else { return Ok(()) };
    let Some(options) = options.as_object() else { return Err("grpc_options: expected an object".into()) };
    const KEYS: [&str; 4] = ["port", "grpc_servicer_functions", "request_timeout_s", "enable_reflection"];
    if let Some(key) = options.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!("gRPCOptions: extra field {key:?} not permitted"));
    }
    if let Some(port) = options.get("port").filter(|p| !p.is_null())
        && port.as_u64().is_none_or(|p| p > 65535)
    {
        return Err(format!("grpc_options.port {port}: expected a port number from 0 to 65535"));
    }
    let functions = match options.get("grpc_servicer_functions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(other) => return Err(format!("grpc_options.grpc_servicer_functions {other}: expected a list")),
    };
    if let Some(bad) = functions.iter().find(|f| !f.as_str().is_some_and(|f| f.contains('.'))) {
        return Err(format!(
            "grpc_options.grpc_servicer_functions: {bad} is not an import path such as \
             'user_defined_protos_pb2_grpc.add_UserDefinedServiceServicer_to_server'"
        ));
    }
    if let Some(timeout) = options.get("request_timeout_s").filter(|t| !t.is_null())
        && !timeout.as_f64().is_some_and(|t| t > 0.0)
    {
        return Err(format!("grpc_options.request_timeout_s {timeout}: expected a positive number"));
    }
    if !functions.is_empty() && options.get("enable_reflection").and_then(Value::as_bool) == Some(true) {
        return Err("grpc_options.enable_reflection: oxray's gRPC proxy serves no reflection service; set it to \
                    false (clients use the .proto files)"
            .into());
    }
    Ok(())
}

/// Ray's `ServeDeploySchema`, as far as its shape: each application's keys and `import_path`,
/// unique names and route prefixes (unknown top-level keys are ignored, as Ray does for forward
/// compatibility).
pub fn check_config(config: &Value) -> Result<(), String> {
    const APP: [&str; 9] = [
        "name",
        "route_prefix",
        "import_path",
        "runtime_env",
        "deployments",
        "args",
        "logging_config",
        "external_scaler_enabled",
        "autoscaling_policy",
    ];
    let Some(top) = config.as_object() else { return Err("ServeDeploySchema: expected an object".into()) };
    refuse_unsupported(top, &["target_capacity", "tracing_config", "controller_options"])?;
    check_logging(top.get("logging_config"))?;
    check_grpc(top.get("grpc_options"))?;
    if let Some(location) = top.get("proxy_location")
        && !matches!(location.as_str(), Some("Disabled" | "HeadOnly" | "EveryNode"))
    {
        return Err(format!(
            "ServeDeploySchema: proxy_location {location} is not one of Disabled, HeadOnly, EveryNode"
        ));
    }
    let apps = match top.get("applications") {
        None => return Ok(()),
        Some(Value::Array(apps)) => apps,
        Some(other) => return Err(format!("ServeDeploySchema: applications must be a list, got {other}")),
    };
    let (mut names, mut prefixes) = (HashSet::new(), HashSet::new());
    for app in apps {
        let Some(app) = app.as_object() else { return Err("ServeApplicationSchema: expected an object".into()) };
        if let Some(key) = app.keys().find(|k| *k == "host" || *k == "port") {
            return Err(format!(
                "ServeApplicationSchema: {key:?} belongs in the config's top-level http_options, not in an application"
            ));
        }
        if let Some(key) = app.keys().find(|k| !APP.contains(&k.as_str())) {
            return Err(format!("ServeApplicationSchema: extra field {key:?} not permitted"));
        }
        refuse_unsupported(app, &["autoscaling_policy"])?;
        check_logging(app.get("logging_config"))?;
        if app.get("external_scaler_enabled").and_then(Value::as_bool) == Some(true) {
            return Err("external_scaler_enabled: oxray's Serve has no external scaler API yet".into());
        }
        let Some(import_path) = app.get("import_path").and_then(Value::as_str) else {
            return Err("ServeApplicationSchema: import_path is required (a string like 'module:app')".into());
        };
        if !import_path.contains(':') && !import_path.contains('.') {
            return Err(format!(
                "ServeApplicationSchema: import_path {import_path:?} must be 'module:attribute' or 'module.attribute'"
            ));
        }
        let name = app.get("name").and_then(Value::as_str).unwrap_or("default");
        if !names.insert(name.to_string()) {
            return Err(format!("ServeDeploySchema: application names must be unique; {name:?} is used twice"));
        }
        match app.get("route_prefix") {
            None => {
                if !prefixes.insert("/".to_string()) {
                    return Err("ServeDeploySchema: route_prefix \"/\" is used by two applications".into());
                }
            }
            Some(Value::Null) => {}
            Some(Value::String(prefix)) => {
                if !prefix.starts_with('/') {
                    return Err(format!("ServeApplicationSchema: route_prefix {prefix:?} must start with '/'"));
                }
                if !prefixes.insert(prefix.clone()) {
                    return Err(format!("ServeDeploySchema: route_prefix {prefix:?} is used by two applications"));
                }
            }
            Some(other) => return Err(format!("ServeApplicationSchema: route_prefix must be a string, got {other}")),
        }
    }
    Ok(())
}

/// Keys oxray's Serve does not carry out yet: refused when set, never ignored.
fn refuse_unsupported(object: &Map<String, Value>, keys: &[&str]) -> Result<(), String> {
    match keys.iter().find(|k| object.get(**k).is_some_and(|v| !v.is_null())) {
        Some(key) => Err(format!("{key}: not supported by oxray's Serve yet (leave it out or null)")),
        None => Ok(()),
    }
}

/// Ray's `LoggingConfig`: its five fields (others refused, as Ray's schema forbids them), an
/// `encoding` of TEXT or JSON, a `log_level` name or number, `enable_access_log` a bool,
/// `logs_dir` a path or null, `additional_log_standard_attrs` a list of names (the replicas check
/// each name).
fn check_logging(config: Option<&Value>) -> Result<(), String> {
    const LEVELS: [&str; 8] = ["CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET"];
    let fields = match config {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(fields)) => fields,
        Some(other) => return Err(format!("logging_config: expected an object, got {other}")),
    };
    for (key, value) in fields {
        let ok = match key.as_str() {
            "encoding" => matches!(value.as_str(), Some("TEXT" | "JSON")),
            "log_level" => {
                value.as_str().is_some_and(|l| LEVELS.contains(&l))
                    || value.as_u64().is_some_and(|n| [0, 10, 20, 30, 40, 50].contains(&n))
            }
            "logs_dir" => value.is_null() || value.is_string(),
            "enable_access_log" => value.is_boolean(),
            "additional_log_standard_attrs" => value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            _ => {
                return Err(format!(
                    "logging_config.{key}: not a field of Ray's LoggingConfig (extra keys are forbidden)"
                ));
            }
        };
        if !ok {
            return Err(format!("logging_config.{key}={value}: not a valid value for Ray's LoggingConfig"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_config;
    use serde_json::json;

    #[test]
    fn a_config_is_checked_as_rays_schema_is() {
        assert!(check_config(&json!({"applications": [{"import_path": "m:app"}]})).is_ok());
        assert!(check_config(&json!({"colour": 1})).is_ok(), "unknown top-level keys are ignored");
        let in_app = json!({"applications": [{"import_path": "m:app", "port": 1}]});
        assert!(check_config(&in_app).unwrap_err().contains("top-level http_options"));
        let extra = json!({"applications": [{"import_path": "m:app", "colour": 1}]});
        assert!(check_config(&extra).unwrap_err().contains("\"colour\""));
        assert!(
            check_config(&json!({"applications": [{"name": "a"}]})).unwrap_err().contains("import_path is required")
        );
        let twice = json!({"applications": [
            {"name": "a", "import_path": "m:a", "route_prefix": "/x"},
            {"name": "b", "import_path": "m:b", "route_prefix": "/x"}]});
        assert!(check_config(&twice).unwrap_err().contains("\"/x\" is used by two"));
        let same = json!({"applications": [{"name": "a", "import_path": "m:a"}, {"name": "a", "import_path": "m:b", "route_prefix": "/b"}]});
        assert!(check_config(&same).unwrap_err().contains("\"a\" is used twice"));
        assert!(check_config(&json!({"proxy_location": "Moon"})).unwrap_err().contains("Moon"));
        assert!(check_config(&json!({"target_capacity": 50})).unwrap_err().contains("target_capacity"));
        let built = json!({"logging_config": {"encoding": "TEXT", "log_level": "INFO", "logs_dir": null,
            "enable_access_log": true, "additional_log_standard_attrs": []}, "applications": []});
        assert!(check_config(&built).is_ok(), "serve build's default logging_config is taken");
        let debug = json!({"logging_config": {"log_level": "DEBUG", "encoding": "JSON"}});
        assert!(check_config(&debug).is_ok());
        let loud = json!({"logging_config": {"log_level": "LOUD"}});
        assert!(check_config(&loud).unwrap_err().contains("logging_config.log_level"));
        let colour = json!({"logging_config": {"colour": "red"}});
        assert!(check_config(&colour).unwrap_err().contains("logging_config.colour"));
        let scaler = json!({"applications": [{"import_path": "m:a", "external_scaler_enabled": true}]});
        assert!(check_config(&scaler).unwrap_err().contains("external_scaler_enabled"));
    }

    #[test]
    fn grpc_options_are_checked_and_reflection_is_refused_once_a_proxy_would_run() {
        let built = json!({"grpc_options": {"port": 9000, "grpc_servicer_functions": [], "enable_reflection": true}});
        assert!(check_config(&built).is_ok(), "serve build's default grpc_options start no gRPC proxy");
        let grpc = json!({"grpc_options": {"port": 9001, "grpc_servicer_functions": ["m_pb2_grpc.add_S_to_server"]}});
        assert!(check_config(&grpc).is_ok());
        let reflect = json!({"grpc_options": {"grpc_servicer_functions": ["m.f"], "enable_reflection": true}});
        assert!(check_config(&reflect).unwrap_err().contains("enable_reflection"));
        let bad = json!({"grpc_options": {"grpc_servicer_functions": ["nodots"]}});
        assert!(check_config(&bad).unwrap_err().contains("import path"));
        let port = json!({"grpc_options": {"port": 70000}});
        assert!(check_config(&port).unwrap_err().contains("70000"));
        let extra = json!({"grpc_options": {"colour": 1}});
        assert!(check_config(&extra).unwrap_err().contains("\"colour\""));
        let timeout = json!({"grpc_options": {"request_timeout_s": 0}});
        assert!(check_config(&timeout).unwrap_err().contains("request_timeout_s"));
    }
}
