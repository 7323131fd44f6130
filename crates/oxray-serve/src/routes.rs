//! What every node's HTTP and gRPC proxies need to know: where to listen, and for each application
//! its ingress deployment's serving replicas and their limits. The controller builds the table;
//! agents receive it as JSON and their proxies route by it. HTTP matching is Ray's: among the
//! applications with a `route_prefix`, the longest live prefix that the path starts with, where a
//! prefix not ending in `/` only matches the whole path or a path continuing with `/`. gRPC routes
//! by the `application` metadata key, which a cluster of one application may leave out.

use serde::{Deserialize, Serialize};

/// Ray's `proxy_location`: which nodes run an HTTP proxy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProxyLocation {
    #[default]
    EveryNode,
    HeadOnly,
    Disabled,
}

/// Ray's `HTTPOptions` as far as the proxy enforces them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HttpOptions {
    pub host: String,
    pub port: u16,
    /// Stripped from a request's path before routing (a deployment behind a prefix-stripping proxy).
    #[serde(default)]
    pub root_path: String,
    /// End to end, from dispatch; None: no timeout (Ray's default).
    #[serde(default)]
    pub request_timeout_s: Option<f64>,
    #[serde(default = "default_keep_alive_timeout_s")]
    pub keep_alive_timeout_s: f64,
    /// The largest request body the proxy takes (413 past it).
    #[serde(default = "default_max_request_body_bytes")]
    pub max_request_body_bytes: u64,
    /// HTTPS: the PEM key and certificate chain each node's proxy reads (Ray's `ssl_keyfile`,
    /// `ssl_certfile`; both or neither).
    #[serde(default)]
    pub ssl_keyfile: Option<String>,
    #[serde(default)]
    pub ssl_certfile: Option<String>,
}

impl HttpOptions {
    /// The proxies speak HTTPS.
    pub fn https(&self) -> bool {
        self.ssl_certfile.is_some()
    }
}

fn default_keep_alive_timeout_s() -> f64 {
    90.0
}

/// 100 MiB: request bodies travel to the replica as one argument.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: u64 = 100 << 20;

fn default_max_request_body_bytes() -> u64 {
    DEFAULT_MAX_REQUEST_BODY_BYTES
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            host: "127.0.0.1".into(),
            port: 8000,
            root_path: String::new(),
            request_timeout_s: None,
            keep_alive_timeout_s: default_keep_alive_timeout_s(),
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            ssl_keyfile: None,
            ssl_certfile: None,
        }
    }
}

/// Ray's `gRPCOptions` as the proxies enforce them: a gRPC proxy runs beside the HTTP one (same
/// host) only when `grpc_servicer_functions` names some.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrpcOptions {
    pub port: u16,
    /// Import paths of generated `add_<Service>Servicer_to_server` functions (the replicas import them).
    pub grpc_servicer_functions: Vec<String>,
    /// End to end, from dispatch; None: no timeout (a call's own `grpc-timeout` still holds).
    #[serde(default)]
    pub request_timeout_s: Option<f64>,
}

/// One replica the proxy may send requests to: its replica id and its actor's id (hex).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReplicaTarget {
    pub replica_id: String,
    pub actor_id: String,
    /// The multiplexed models it holds, as it last told the controller.
    #[serde(default)]
    pub model_ids: Vec<String>,
}

/// An application the proxies reach: over HTTP when it has a route prefix, over gRPC by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// "" for an application without one (`route_prefix=None`: reachable by handle or gRPC only).
    pub route_prefix: String,
    /// Whether HTTP reaches it (it has a route prefix).
    #[serde(default = "default_http")]
    pub http: bool,
    pub app: String,
    /// The ingress deployment, whose replicas serve the route.
    pub deployment: String,
    pub max_ongoing_requests: u32,
    /// -1: no limit on the requests a proxy holds waiting for a replica.
    pub max_queued_requests: i64,
    /// Ray's `backpressure_config`: 503 or 429, and the `Retry-After` seconds.
    #[serde(default = "default_backpressure_status")]
    pub backpressure_status: u16,
    #[serde(default)]
    pub retry_after_s: Option<f64>,
    pub replicas: Vec<ReplicaTarget>,
    /// Set when the deployment failed to deploy: requests get a 503 at once instead of waiting.
    #[serde(default)]
    pub unavailable: Option<String>,
    /// An autoscaled deployment: how often the proxy reports its requests to the controller.
    #[serde(default)]
    pub metrics_interval_s: Option<f64>,
}

fn default_backpressure_status() -> u16 {
    503
}

fn default_http() -> bool {
    true
}

/// Why a gRPC call names no application.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppLookupError {
    #[error(
        "Application '{0}' not found. Ping /ray.serve.RayServeAPIService/ListApplications for available applications."
    )]
    NotFound(String),
    #[error(
        "Application metadata not set. Please ping /ray.serve.RayServeAPIService/ListApplications for available \
         applications."
    )]
    Unnamed,
}

/// Everything a proxy routes by. `http` None (or `Disabled`): no proxy runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteTable {
    #[serde(default)]
    pub proxy_location: ProxyLocation,
    #[serde(default)]
    pub http: Option<HttpOptions>,
    /// Set when a gRPC proxy runs beside the HTTP one.
    #[serde(default)]
    pub grpc: Option<GrpcOptions>,
    #[serde(default)]
    pub routes: Vec<Route>,
    /// The controller's actor (hex), which takes the proxies' load reports (`record_proxy_load`).
    #[serde(default)]
    pub controller_actor_id: Option<String>,
}

impl RouteTable {
    /// Parses the controller's JSON; the error names what is wrong.
    pub fn from_json(raw: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(raw)
    }

    /// Ray's longest-prefix match of `path` (without the query string).
    pub fn match_path(&self, path: &str) -> Option<&Route> {
        self.http_routes()
            .filter(|route| prefix_matches(&route.route_prefix, path))
            .max_by_key(|route| route.route_prefix.len())
    }

    /// The applications HTTP reaches.
    pub fn http_routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter().filter(|route| route.http)
    }

    /// The application a gRPC call names (its `application` metadata); with none named, the only
    /// application there is, as Ray's gRPC proxy picks it.
    pub fn match_app(&self, app: Option<&str>) -> Result<&Route, AppLookupError> {
        match app {
            Some(name) => {
                self.routes.iter().find(|r| r.app == name).ok_or_else(|| AppLookupError::NotFound(name.to_string()))
            }
            None => match self.routes.as_slice() {
                [only] => Ok(only),
                _ => Err(AppLookupError::Unnamed),
            },
        }
    }
}

fn prefix_matches(prefix: &str, path: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    let Some(rest) = path.strip_prefix(prefix) else { return false };
    prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(prefixes: &[&str]) -> RouteTable {
        let routes = prefixes
            .iter()
            .map(|p| Route {
                route_prefix: p.to_string(),
                http: true,
                app: format!("app{p}"),
                deployment: "D".into(),
                max_ongoing_requests: 5,
                max_queued_requests: -1,
                backpressure_status: 503,
                retry_after_s: None,
                replicas: Vec::new(),
                unavailable: None,
                metrics_interval_s: None,
            })
            .collect();
        RouteTable { routes, ..RouteTable::default() }
    }

    fn matched<'a>(t: &'a RouteTable, path: &str) -> Option<&'a str> {
        t.match_path(path).map(|r| r.route_prefix.as_str())
    }

    #[test]
    fn the_longest_prefix_wins_and_a_prefix_matches_only_whole_segments() {
        let t = table(&["/", "/a", "/a/b", "/c/"]);
        assert_eq!(matched(&t, "/a"), Some("/a"));
        assert_eq!(matched(&t, "/a/"), Some("/a"));
        assert_eq!(matched(&t, "/a/x"), Some("/a"));
        assert_eq!(matched(&t, "/a/b/c"), Some("/a/b"));
        assert_eq!(matched(&t, "/ab"), Some("/"));
        assert_eq!(matched(&t, "/c/d"), Some("/c/"));
        assert_eq!(matched(&t, "/c"), Some("/"));
        assert_eq!(matched(&table(&["/plain"]), "/plainx"), None);
        assert_eq!(matched(&table(&["/Plain"]), "/plain"), None, "matching is case-sensitive");
    }

    #[test]
    fn an_application_without_a_route_prefix_is_reached_by_grpc_only() {
        let mut t = table(&["/a", ""]);
        t.routes[1].http = false;
        t.routes[1].app = "hidden".into();
        assert_eq!(matched(&t, "/x"), None, "the prefix-less application is no catch-all");
        assert_eq!(t.http_routes().count(), 1);
        assert_eq!(t.match_app(Some("hidden")).unwrap().app, "hidden");
        assert_eq!(t.match_app(Some("nope")).unwrap_err(), AppLookupError::NotFound("nope".into()));
        assert!(t.match_app(Some("nope")).unwrap_err().to_string().contains("ListApplications"));
        assert_eq!(t.match_app(None).unwrap_err(), AppLookupError::Unnamed, "two applications: a name is needed");
        let one = table(&["/a"]);
        assert_eq!(one.match_app(None).unwrap().app, "app/a");
    }

    #[test]
    fn the_controllers_json_parses_with_defaults() {
        let raw = br#"{"proxy_location":"HeadOnly","http":{"host":"0.0.0.0","port":8123},
            "routes":[{"route_prefix":"/x","app":"a","deployment":"D","max_ongoing_requests":5,
            "max_queued_requests":-1,"replicas":[{"replica_id":"r1","actor_id":"ab"}]}]}"#;
        let t = RouteTable::from_json(raw).unwrap();
        assert_eq!(t.proxy_location, ProxyLocation::HeadOnly);
        let http = t.http.unwrap();
        assert_eq!((http.port, http.keep_alive_timeout_s, http.request_timeout_s), (8123, 90.0, None));
        assert_eq!(t.routes[0].backpressure_status, 503);
        assert!(
            RouteTable::from_json(br#"{"routes":[{"app":"a"}]}"#).unwrap_err().to_string().contains("route_prefix")
        );
    }
}
