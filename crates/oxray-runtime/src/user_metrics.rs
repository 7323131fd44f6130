//! Application metrics (`ray.util.metrics`' counters, gauges and histograms, and
//! Serve's own series): recorded in each process's [`MetricsRegistry`],
//! reported to the node's agent as cumulative series (a report replaces the
//! process's last one, so a lost or repeated report changes nothing), kept there
//! per process in a [`NodeMetrics`] until the process stops reporting, and served
//! on the node's `/metrics` in Prometheus text under Ray's names: `ray_<name>`,
//! counters with `_total`, histograms as `_bucket`/`_sum`/`_count`.

use crate::proto::{MetricSeries, MetricsReport};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::{Duration, Instant};

/// How long a process's series stay after its last report (it reports at least every few
/// seconds while alive).
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// At most this many series per process: a tag with unbounded values must not exhaust memory.
pub const MAX_SERIES_PER_PROCESS: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }

    fn parse(kind: &str) -> Option<Self> {
        match kind {
            "counter" => Some(MetricKind::Counter),
            "gauge" => Some(MetricKind::Gauge),
            "histogram" => Some(MetricKind::Histogram),
            _ => None,
        }
    }
}

/// Why a recording was refused; each names the metric and what was expected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MetricError {
    #[error("metric {name:?} is a {existing} in this process; it cannot also be a {requested}")]
    KindConflict { name: String, existing: &'static str, requested: &'static str },
    #[error("histogram {name:?} has boundaries {existing:?} in this process; it cannot also have {requested:?}")]
    BoundariesConflict { name: String, existing: Vec<f64>, requested: Vec<f64> },
    #[error(
        "metric {name:?} has {MAX_SERIES_PER_PROCESS} series in this process (one per tag combination): use fewer tag values"
    )]
    TooManySeries { name: String },
}

#[derive(Clone, Debug)]
struct Family {
    kind: MetricKind,
    description: String,
    boundaries: Vec<f64>,
}

#[derive(Clone, Debug, Default)]
struct Values {
    value: f64,
    bucket_counts: Vec<u64>,
    count: u64,
}

/// One process's metrics, cumulative since it started.
#[derive(Default)]
pub struct MetricsRegistry {
    families: HashMap<String, Family>,
    series: BTreeMap<(String, Vec<(String, String)>), Values>,
    /// Something changed since the last report (a gauge set to its value again is no change).
    changed: bool,
}

impl MetricsRegistry {
    /// Records `value` for `name` with `tags`: added to a counter, set on a gauge, observed by a
    /// histogram (whose `boundaries` are its buckets' upper bounds).
    pub fn record(
        &mut self,
        kind: MetricKind,
        name: &str,
        description: &str,
        tags: Vec<(String, String)>,
        value: f64,
        boundaries: &[f64],
    ) -> Result<(), MetricError> {
        let family = self.families.entry(name.to_string()).or_insert_with(|| Family {
            kind,
            description: description.to_string(),
            boundaries: boundaries.to_vec(),
        });
        if family.kind != kind {
            return Err(MetricError::KindConflict {
                name: name.to_string(),
                existing: family.kind.as_str(),
                requested: kind.as_str(),
            });
        }
        if kind == MetricKind::Histogram && family.boundaries != boundaries {
            return Err(MetricError::BoundariesConflict {
                name: name.to_string(),
                existing: family.boundaries.clone(),
                requested: boundaries.to_vec(),
            });
        }
        let mut tags = tags;
        tags.sort();
        let key = (name.to_string(), tags);
        if !self.series.contains_key(&key) && self.series.len() >= MAX_SERIES_PER_PROCESS {
            return Err(MetricError::TooManySeries { name: name.to_string() });
        }
        let new = !self.series.contains_key(&key);
        let values = self.series.entry(key).or_default();
        self.changed |= new || kind != MetricKind::Gauge || values.value != value;
        match kind {
            MetricKind::Counter => values.value += value,
            MetricKind::Gauge => values.value = value,
            MetricKind::Histogram => {
                if values.bucket_counts.is_empty() {
                    values.bucket_counts = vec![0; boundaries.len() + 1];
                }
                let bucket = boundaries.iter().position(|bound| value <= *bound).unwrap_or(boundaries.len());
                values.bucket_counts[bucket] += 1;
                values.value += value;
                values.count += 1;
            }
        }
        Ok(())
    }

    /// Every series with its cumulative values, as reported to the agent.
    pub fn report(&self, client_id: &[u8]) -> MetricsReport {
        let series = self
            .series
            .iter()
            .map(|((name, tags), values)| {
                let family = &self.families[name];
                MetricSeries {
                    name: name.clone(),
                    description: family.description.clone(),
                    kind: family.kind.as_str().to_string(),
                    tags: tags.iter().cloned().collect(),
                    value: values.value,
                    boundaries: if family.kind == MetricKind::Histogram {
                        family.boundaries.clone()
                    } else {
                        Vec::new()
                    },
                    bucket_counts: values.bucket_counts.clone(),
                    count: values.count,
                }
            })
            .collect();
        MetricsReport { client_id: client_id.to_vec(), series }
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Whether anything changed since the last call (a report need not be sent otherwise, but
    /// for the agent to keep the process's series: see `STALE_AFTER`).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// A report that did not arrive: the next one is sent whatever changes.
    pub fn mark_changed(&mut self) {
        self.changed = true;
    }
}

/// The series every process on a node last reported.
#[derive(Default)]
pub struct NodeMetrics {
    processes: HashMap<Vec<u8>, (Instant, Vec<MetricSeries>)>,
}

impl NodeMetrics {
    /// Keeps a process's report (replacing its last one); at most `MAX_SERIES_PER_PROCESS`.
    pub fn report(&mut self, mut report: MetricsReport, now: Instant) {
        report.series.truncate(MAX_SERIES_PER_PROCESS);
        self.processes.insert(report.client_id, (now, report.series));
        self.processes.retain(|_, (at, _)| now.duration_since(*at) < STALE_AFTER);
    }

    /// Prometheus text of every live process's series; each carries the process's `WorkerId`
    /// and the node's `NodeAddress`, as Ray's do. A family is typed by the first process that
    /// reported it; a process that reported it as another kind is left out of it.
    pub fn render(&self, node_ip: &str, now: Instant) -> String {
        let mut families: BTreeMap<&str, (MetricKind, &str, Vec<String>)> = BTreeMap::new();
        let mut processes: Vec<_> =
            self.processes.iter().filter(|(_, (at, _))| now.duration_since(*at) < STALE_AFTER).collect();
        processes.sort_by(|a, b| a.0.cmp(b.0));
        for (client_id, (_, series)) in processes {
            let worker = hex::encode(client_id);
            for s in series {
                let Some(kind) = MetricKind::parse(&s.kind) else { continue };
                let family = families.entry(&s.name).or_insert((kind, &s.description, Vec::new()));
                if family.0 != kind {
                    continue;
                }
                let mut labels: Vec<(&str, &str)> = s.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                labels.sort();
                labels.push(("WorkerId", &worker));
                labels.push(("NodeAddress", node_ip));
                let name = format!("ray_{}", s.name);
                match kind {
                    MetricKind::Counter => family.2.push(line(&format!("{name}_total"), &labels, s.value)),
                    MetricKind::Gauge => family.2.push(line(&name, &labels, s.value)),
                    MetricKind::Histogram => {
                        let mut cumulative = 0;
                        let bounds = s.boundaries.iter().map(|b| b.to_string()).chain(["+Inf".to_string()]);
                        for (bound, count) in bounds.zip(&s.bucket_counts) {
                            cumulative += count;
                            let mut with_le = labels.clone();
                            with_le.push(("le", &bound));
                            family.2.push(line(&format!("{name}_bucket"), &with_le, cumulative as f64));
                        }
                        family.2.push(line(&format!("{name}_sum"), &labels, s.value));
                        family.2.push(line(&format!("{name}_count"), &labels, s.count as f64));
                    }
                }
            }
        }
        let mut out = String::new();
        for (name, (kind, description, lines)) in families {
            let help = if description.is_empty() { name } else { description };
            let _ = writeln!(out, "# HELP ray_{name} {}", help.replace('\\', "\\\\").replace('\n', "\\n"));
            let _ = writeln!(out, "# TYPE ray_{name} {}", kind.as_str());
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
        out
    }
}

fn line(name: &str, labels: &[(&str, &str)], value: f64) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    format!("{name}{{{}}} {value}", labels.join(","))
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_process_s_series_render_under_rays_names_per_process() {
        let mut registry = MetricsRegistry::default();
        let route = tags(&[("route", "/a")]);
        registry.record(MetricKind::Counter, "requests", "requests served", route.clone(), 1.0, &[]).unwrap();
        registry.record(MetricKind::Counter, "requests", "", route.clone(), 2.0, &[]).unwrap();
        registry.record(MetricKind::Gauge, "queue", "", vec![], 5.0, &[]).unwrap();
        registry.record(MetricKind::Gauge, "queue", "", vec![], 3.0, &[]).unwrap();
        for v in [0.5, 3.0, 70.0] {
            registry.record(MetricKind::Histogram, "latency_ms", "", route.clone(), v, &[1.0, 10.0]).unwrap();
        }
        let mut node = NodeMetrics::default();
        let now = Instant::now();
        node.report(registry.report(&[0xab]), now);
        let text = node.render("10.0.0.2", now);
        let labels = "route=\"/a\",WorkerId=\"ab\",NodeAddress=\"10.0.0.2\"";
        assert!(text.contains("# HELP ray_requests requests served\n# TYPE ray_requests counter\n"), "{text}");
        assert!(text.contains(&format!("ray_requests_total{{{labels}}} 3\n")), "{text}");
        assert!(text.contains("ray_queue{WorkerId=\"ab\",NodeAddress=\"10.0.0.2\"} 3\n"), "{text}");
        for (le, n) in [("1", 1), ("10", 2), ("+Inf", 3)] {
            assert!(text.contains(&format!("ray_latency_ms_bucket{{{labels},le=\"{le}\"}} {n}\n")), "{text}");
        }
        assert!(text.contains(&format!("ray_latency_ms_sum{{{labels}}} 73.5\n")), "{text}");
        assert!(text.contains(&format!("ray_latency_ms_count{{{labels}}} 3\n")), "{text}");

        // A second report replaces the first (cumulative values, so no double counting).
        registry.record(MetricKind::Counter, "requests", "", route, 1.0, &[]).unwrap();
        node.report(registry.report(&[0xab]), now);
        assert!(node.render("10.0.0.2", now).contains(&format!("ray_requests_total{{{labels}}} 4\n")));
        // A process that stopped reporting goes.
        assert!(node.render("10.0.0.2", now + STALE_AFTER).is_empty());
    }

    #[test]
    fn a_gauge_set_to_its_value_again_is_no_change() {
        let mut registry = MetricsRegistry::default();
        registry.record(MetricKind::Gauge, "g", "", vec![], 1.0, &[]).unwrap();
        assert!(registry.take_changed() && !registry.take_changed());
        registry.record(MetricKind::Gauge, "g", "", vec![], 1.0, &[]).unwrap();
        assert!(!registry.take_changed());
        registry.record(MetricKind::Gauge, "g", "", vec![], 2.0, &[]).unwrap();
        registry.record(MetricKind::Counter, "c", "", vec![], 1.0, &[]).unwrap();
        assert!(registry.take_changed());
    }

    #[test]
    fn a_name_keeps_its_kind_and_boundaries() {
        let mut registry = MetricsRegistry::default();
        registry.record(MetricKind::Counter, "x", "", vec![], 1.0, &[]).unwrap();
        let error = registry.record(MetricKind::Gauge, "x", "", vec![], 1.0, &[]).unwrap_err();
        assert_eq!(error.to_string(), "metric \"x\" is a counter in this process; it cannot also be a gauge");
        registry.record(MetricKind::Histogram, "h", "", vec![], 1.0, &[1.0]).unwrap();
        let error = registry.record(MetricKind::Histogram, "h", "", vec![], 1.0, &[2.0]).unwrap_err();
        assert!(matches!(error, MetricError::BoundariesConflict { .. }));
    }
}
