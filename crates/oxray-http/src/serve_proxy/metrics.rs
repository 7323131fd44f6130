//! The proxy's Prometheus series, under Ray Serve's names (`ray_serve_num_http_requests_total`,
//! `ray_serve_num_http_error_requests_total`, `ray_serve_http_request_latency_ms` with Ray's
//! buckets, `ray_serve_num_ongoing_http_requests`), served on the node's `/metrics`. The `route`
//! label is the matched route prefix (`""` for a 404, `/-/routes` and `/-/healthz` for those).

use crate::metrics::Exposition;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// Ray's default latency buckets, in ms (`RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS`).
const BUCKETS_MS: [f64; 19] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 300.0, 400.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 60000.0,
    120000.0, 300000.0, 600000.0,
];

/// (route, method, application, status code).
type Labels = (String, String, String, u16);

#[derive(Default)]
struct Series {
    count: u64,
    sum_ms: f64,
    buckets: [u64; BUCKETS_MS.len()],
}

#[derive(Default)]
pub struct ProxyMetrics {
    requests: Mutex<BTreeMap<Labels, Series>>,
    ongoing: AtomicI64,
}

/// Counts a request as ongoing until dropped.
pub struct Ongoing<'a>(&'a ProxyMetrics);

impl Drop for Ongoing<'_> {
    fn drop(&mut self) {
        self.0.ongoing.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ProxyMetrics {
    pub fn start(&self) -> Ongoing<'_> {
        self.ongoing.fetch_add(1, Ordering::Relaxed);
        Ongoing(self)
    }

    pub fn record(&self, route: &str, method: &str, application: &str, status: u16, latency_ms: f64) {
        let mut requests = self.requests.lock();
        let series = requests.entry((route.into(), method.into(), application.into(), status)).or_default();
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
        for ((_, _, app, status), series) in self.requests.lock().iter() {
            if app.is_empty() {
                continue;
            }
            let entry = out
                .entry(app.clone())
                .or_insert_with(|| serde_json::json!({"requests": 0u64, "errors": 0u64, "latency_sum_ms": 0.0}));
            entry["requests"] = (entry["requests"].as_u64().unwrap_or(0) + series.count).into();
            if *status >= 400 {
                entry["errors"] = (entry["errors"].as_u64().unwrap_or(0) + series.count).into();
            }
            entry["latency_sum_ms"] = (entry["latency_sum_ms"].as_f64().unwrap_or(0.0) + series.sum_ms).into();
        }
        serde_json::Value::Object(out)
    }

    /// The series as Prometheus text, labelled with the node.
    pub fn render(&self, node_id: &str, node_ip: &str) -> String {
        let mut out = Exposition::default();
        let requests = self.requests.lock();
        let mut errors: BTreeMap<(&str, &str, &str, u16), u64> = BTreeMap::new();
        for ((route, method, app, status), series) in requests.iter() {
            let code = status.to_string();
            let labels = [("route", route.as_str()), ("method", method), ("application", app), ("status_code", &code)];
            out.add(
                "ray_serve_num_http_requests_total",
                "counter",
                "HTTP requests the node's Serve proxy answered.",
                &labels,
                series.count as f64,
            );
            if *status >= 400 {
                *errors.entry((route, method, app, *status)).or_default() += series.count;
            }
            let name = "ray_serve_http_request_latency_ms";
            let help = "Latency of HTTP requests through the node's Serve proxy, in ms.";
            // Each bucket already counts every request at or under its bound.
            for (bound, n) in BUCKETS_MS.iter().zip(series.buckets) {
                let le = format!("{bound}");
                out.add_line(
                    name,
                    "histogram",
                    help,
                    "_bucket",
                    &[&labels[..], &[("le", le.as_str())]].concat(),
                    n as f64,
                );
            }
            out.add_line(
                name,
                "histogram",
                help,
                "_bucket",
                &[&labels[..], &[("le", "+Inf")]].concat(),
                series.count as f64,
            );
            out.add_line(name, "histogram", help, "_sum", &labels, series.sum_ms);
            out.add_line(name, "histogram", help, "_count", &labels, series.count as f64);
        }
        for ((route, method, app, status), n) in errors {
            let code = status.to_string();
            out.add(
                "ray_serve_num_http_error_requests_total",
                "counter",
                "HTTP requests the node's Serve proxy answered with a 4xx or 5xx.",
                &[("route", route), ("error_code", &code), ("method", method), ("application", app)],
                n as f64,
            );
        }
        out.add(
            "ray_serve_num_ongoing_http_requests",
            "gauge",
            "HTTP requests the node's Serve proxy is answering now.",
            &[("node_id", node_id), ("node_ip_address", node_ip)],
            self.ongoing.load(Ordering::Relaxed) as f64,
        );
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
        let _ongoing = metrics.start();
        assert!(
            metrics
                .render("n1", "ip")
                .contains(r#"ray_serve_num_ongoing_http_requests{node_id="n1",node_ip_address="ip"} 1"#)
        );
    }
}
