//! The proxies' Prometheus series, under Ray Serve's names (`ray_serve_num_http_requests_total`,
//! `ray_serve_num_http_error_requests_total`, `ray_serve_http_request_latency_ms` with Ray's
//! buckets, `ray_serve_num_ongoing_http_requests`, and their `grpc` twins), served on the node's
//! `/metrics`. Over HTTP the `route` label is the matched route prefix (`""` for a 404,
//! `/-/routes` and `/-/healthz` for those) and `status_code` the HTTP status; over gRPC `route`
//! is the application, `method` the gRPC method and `status_code` the gRPC code's name.

use crate::metrics::Exposition;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// Ray's default latency buckets, in ms (`RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS`).
const BUCKETS_MS: [f64; 19] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 300.0, 400.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 60000.0,
    120000.0, 300000.0, 600000.0,
];

/// (route, method, application, status code, whether it is an error).
type Labels = (String, String, String, String, bool);

#[derive(Default)]
struct Series {
    count: u64,
    sum_ms: f64,
    buckets: [u64; BUCKETS_MS.len()],
}

/// One protocol's series names and help texts.
pub struct SeriesNames {
    total: &'static str,
    total_help: &'static str,
    latency: &'static str,
    latency_help: &'static str,
    errors: &'static str,
    errors_help: &'static str,
    ongoing: &'static str,
    ongoing_help: &'static str,
}

pub const HTTP: SeriesNames = SeriesNames {
    total: "ray_serve_num_http_requests_total",
    total_help: "HTTP requests the node's Serve proxy answered.",
    latency: "ray_serve_http_request_latency_ms",
    latency_help: "Latency of HTTP requests through the node's Serve proxy, in ms.",
    errors: "ray_serve_num_http_error_requests_total",
    errors_help: "HTTP requests the node's Serve proxy answered with a 4xx or 5xx.",
    ongoing: "ray_serve_num_ongoing_http_requests",
    ongoing_help: "HTTP requests the node's Serve proxy is answering now.",
};

pub const GRPC: SeriesNames = SeriesNames {
    total: "ray_serve_num_grpc_requests_total",
    total_help: "gRPC calls the node's Serve proxy answered.",
    latency: "ray_serve_grpc_request_latency_ms",
    latency_help: "Latency of gRPC calls through the node's Serve proxy, in ms.",
    errors: "ray_serve_num_grpc_error_requests_total",
    errors_help: "gRPC calls the node's Serve proxy answered with a status other than OK.",
    ongoing: "ray_serve_num_ongoing_grpc_requests",
    ongoing_help: "gRPC calls the node's Serve proxy is answering now.",
};

pub struct ProxyMetrics {
    names: &'static SeriesNames,
    requests: Mutex<BTreeMap<Labels, Series>>,
    ongoing: AtomicI64,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        ProxyMetrics::new(&HTTP)
    }
}

/// Counts a request as ongoing until dropped.
pub struct Ongoing<'a>(&'a ProxyMetrics);

impl Drop for Ongoing<'_> {
    fn drop(&mut self) {
        self.0.ongoing.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ProxyMetrics {
    pub fn new(names: &'static SeriesNames) -> Self {
        ProxyMetrics { names, requests: Mutex::default(), ongoing: AtomicI64::default() }
    }

    pub fn start(&self) -> Ongoing<'_> {
        self.ongoing.fetch_add(1, Ordering::Relaxed);
        Ongoing(self)
    }

    /// An HTTP request answered with `status`.
    pub fn record(&self, route: &str, method: &str, application: &str, status: u16, latency_ms: f64) {
        self.record_status(route, method, application, &status.to_string(), status >= 400, latency_ms);
    }

    /// A request answered with `status` (a gRPC code's name), an error or not.
    pub fn record_status(
        &self,
        route: &str,
        method: &str,
        application: &str,
        status: &str,
        error: bool,
        latency_ms: f64,
    ) {
        let mut requests = self.requests.lock();
        let key = (route.into(), method.into(), application.into(), status.into(), error);
        let series = requests.entry(key).or_default();
        series.count += 1;
        series.sum_ms += latency_ms;
        for (i, bound) in BUCKETS_MS.iter().enumerate() {
            if latency_ms <= *bound {
                series.buckets[i] += 1;
            }
        }
    }

    /// `{application: {"requests", "errors", "latency_sum_ms"}}`, requests to no application left out.
    pub fn per_application(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for ((_, _, app, _, error), series) in self.requests.lock().iter() {
            if app.is_empty() {
                continue;
            }
            let entry = out
                .entry(app.clone())
                .or_insert_with(|| serde_json::json!({"requests": 0u64, "errors": 0u64, "latency_sum_ms": 0.0}));
            entry["requests"] = (entry["requests"].as_u64().unwrap_or(0) + series.count).into();
            if *error {
                entry["errors"] = (entry["errors"].as_u64().unwrap_or(0) + series.count).into();
            }
            entry["latency_sum_ms"] = (entry["latency_sum_ms"].as_f64().unwrap_or(0.0) + series.sum_ms).into();
        }
        serde_json::Value::Object(out)
    }

    /// The series as Prometheus text, labelled with the node.
    pub fn render(&self, node_id: &str, node_ip: &str) -> String {
        let n = self.names;
        let mut out = Exposition::default();
        let requests = self.requests.lock();
        let mut errors: BTreeMap<(&str, &str, &str, &str), u64> = BTreeMap::new();
        for ((route, method, app, status, error), series) in requests.iter() {
            let labels = [("route", route.as_str()), ("method", method), ("application", app), ("status_code", status)];
            out.add(n.total, "counter", n.total_help, &labels, series.count as f64);
            if *error {
                *errors.entry((route, method, app, status)).or_default() += series.count;
            }
            // Each bucket already counts every request at or under its bound.
            for (bound, count) in BUCKETS_MS.iter().zip(series.buckets) {
                let le = format!("{bound}");
                let bucket = [&labels[..], &[("le", le.as_str())]].concat();
                out.add_line(n.latency, "histogram", n.latency_help, "_bucket", &bucket, count as f64);
            }
            let bucket = [&labels[..], &[("le", "+Inf")]].concat();
            out.add_line(n.latency, "histogram", n.latency_help, "_bucket", &bucket, series.count as f64);
            out.add_line(n.latency, "histogram", n.latency_help, "_sum", &labels, series.sum_ms);
            out.add_line(n.latency, "histogram", n.latency_help, "_count", &labels, series.count as f64);
        }
        for ((route, method, app, status), count) in errors {
            let labels = [("route", route), ("error_code", status), ("method", method), ("application", app)];
            out.add(n.errors, "counter", n.errors_help, &labels, count as f64);
        }
        let node = [("node_id", node_id), ("node_ip_address", node_ip)];
        out.add(n.ongoing, "gauge", n.ongoing_help, &node, self.ongoing.load(Ordering::Relaxed) as f64);
        out.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_under_rays_names_with_cumulative_buckets() {
        let metrics = ProxyMetrics::default();
        metrics.record("/a", "GET", "app", 200, 3.0);
        metrics.record("/a", "GET", "app", 200, 30.0);
        metrics.record("", "GET", "", 404, 0.5);
        let text = metrics.render("n1", "127.0.0.1");
        assert!(text.contains(
            r#"ray_serve_num_http_requests_total{route="/a",method="GET",application="app",status_code="200"} 2"#
        ));
        assert!(text.contains(r#"ray_serve_http_request_latency_ms_bucket{route="/a",method="GET",application="app",status_code="200",le="5"} 1"#));
        assert!(text.contains(r#"ray_serve_http_request_latency_ms_bucket{route="/a",method="GET",application="app",status_code="200",le="50"} 2"#));
        assert!(text.contains(
            r#"ray_serve_http_request_latency_ms_sum{route="/a",method="GET",application="app",status_code="200"} 33"#
        ));
        assert!(text.contains(
            r#"ray_serve_num_http_error_requests_total{route="",error_code="404",method="GET",application=""} 1"#
        ));
        assert!(text.contains("# TYPE ray_serve_http_request_latency_ms histogram"));
        let grpc = ProxyMetrics::new(&GRPC);
        grpc.record_status("app", "/p.S/M", "app", "NOT_FOUND", true, 1.0);
        let text = grpc.render("n1", "ip");
        assert!(text.contains(
            r#"ray_serve_num_grpc_requests_total{route="app",method="/p.S/M",application="app",status_code="NOT_FOUND"} 1"#
        ));
        assert!(text.contains(
            r#"ray_serve_num_grpc_error_requests_total{route="app",error_code="NOT_FOUND",method="/p.S/M",application="app"} 1"#
        ));
        let _ongoing = metrics.start();
        assert!(
            metrics
                .render("n1", "ip")
                .contains(r#"ray_serve_num_ongoing_http_requests{node_id="n1",node_ip_address="ip"} 1"#)
        );
    }
}
