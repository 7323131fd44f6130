//! Node labels and Ray's label selectors: a task, an actor or a placement-group
//! bundle may ask for nodes whose labels match `{key: condition}`, where a
//! condition is `value`, `!value`, `in(a, b)` or `!in(a, b)`. A node lacking the
//! key matches only the negated forms, as in Ray.

use std::collections::HashMap;
use std::fmt;

/// The label every node carries: its id, as Ray's `ray.io/node-id`.
pub const NODE_ID_LABEL: &str = "ray.io/node-id";
/// The label a node with GPUs carries: their model, as Ray's `ray.io/accelerator-type`.
pub const ACCELERATOR_LABEL: &str = "ray.io/accelerator-type";

#[derive(Debug, thiserror::Error)]
#[error("label_selector {key:?}: {value:?} is not a condition: {reason}")]
pub struct LabelError {
    key: String,
    value: String,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    In(Vec<String>),
    NotIn(Vec<String>),
}

/// A parsed `label_selector`: every condition must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, Condition)>);

/// Kubernetes' label syntax, which Ray checks: a name is at most 63 characters,
/// alphanumeric at both ends, with `-`, `_` and `.` between.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A key is `name` or `prefix/name`, the prefix a DNS subdomain (`ray.io`).
fn key_problem(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let valid = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                let b = part.as_bytes();
                !b.is_empty()
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            });
        if !valid {
            return Some("a key's prefix must be a DNS subdomain such as ray.io (lowercase letters, digits, '-', '.')");
        }
    }
    (!is_label_name(name))
        .then_some("a key's name must be 1-63 characters, alphanumeric at both ends, with '-', '_' or '.' between")
}

fn value_problem(value: &str) -> Option<&'static str> {
    (!value.is_empty() && !is_label_name(value))
        .then_some("a value must be at most 63 characters, alphanumeric at both ends, with '-', '_' or '.' between")
}

impl LabelSelector {
    pub fn parse(selector: &HashMap<String, String>) -> Result<Self, LabelError> {
        let mut conditions = Vec::with_capacity(selector.len());
        for (key, raw) in selector {
            let err = |reason| LabelError { key: key.clone(), value: raw.clone(), reason };
            if key.trim().is_empty() {
                return Err(err("label keys must not be empty"));
            }
            if let Some(problem) = key_problem(key) {
                return Err(err(problem));
            }
            let value = raw.trim();
            let (negated, body) = match value.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, value),
            };
            let values = match body.strip_prefix("in(").and_then(|b| b.strip_suffix(')')) {
                Some(list) => {
                    let items: Vec<String> = list.split(',').map(|v| v.trim().to_string()).collect();
                    if items.iter().any(|v| v.is_empty()) {
                        return Err(err("expected in(a, b, ...) with no empty value"));
                    }
                    items
                }
                None if body.is_empty() => return Err(err("expected a value, !value, in(a, b) or !in(a, b)")),
                None if body.contains(['(', ')', ',']) => {
                    return Err(err("expected a value, !value, in(a, b) or !in(a, b)"));
                }
                None => vec![body.to_string()],
            };
            if let Some(problem) = values.iter().find_map(|v| value_problem(v)) {
                return Err(err(problem));
            }
            conditions.push((key.clone(), if negated { Condition::NotIn(values) } else { Condition::In(values) }));
        }
        conditions.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(LabelSelector(conditions))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, labels: &HashMap<String, String>) -> bool {
        self.0.iter().all(|(key, condition)| match (condition, labels.get(key)) {
            (Condition::In(values), Some(v)) => values.contains(v),
            (Condition::In(_), None) => false,
            (Condition::NotIn(values), Some(v)) => !values.contains(v),
            (Condition::NotIn(_), None) => true,
        })
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(key, condition)| match condition {
                Condition::In(v) if v.len() == 1 => format!("{key}={}", v[0]),
                Condition::In(v) => format!("{key} in ({})", v.join(", ")),
                Condition::NotIn(v) if v.len() == 1 => format!("{key}!={}", v[0]),
                Condition::NotIn(v) => format!("{key} not in ({})", v.join(", ")),
            })
            .collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

/// A node's own labels must be plain: a non-empty key and a value without the selector syntax.
pub fn check_node_labels(labels: &HashMap<String, String>) -> Result<(), String> {
    for (key, value) in labels {
        if key.trim().is_empty() {
            return Err(format!("node label {key:?}={value:?}: label keys must not be empty"));
        }
        if let Some(problem) = key_problem(key).or_else(|| value_problem(value)) {
            return Err(format!("node label {key:?}={value:?}: {problem}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selectors_match_as_rays_do() {
        let node = map(&[("zone", "a"), ("tier", "gpu")]);
        let matches = |s: &[(&str, &str)]| LabelSelector::parse(&map(s)).unwrap().matches(&node);
        assert!(matches(&[("zone", "a")]));
        assert!(!matches(&[("zone", "b")]));
        assert!(matches(&[("zone", "!b")]));
        assert!(matches(&[("zone", "in(b, a)"), ("tier", "!in(cpu)")]));
        assert!(!matches(&[("zone", "!in(a,b)")]));
        assert!(!matches(&[("missing", "x")]), "a missing key fails an equality");
        assert!(matches(&[("missing", "!x")]), "and passes a negation");
        for bad in ["", "in()", "in(a,)", "a,b", "!", "??==ags!", "-bad-value-", "in(H100,, B200)", "matches(TPU)"] {
            assert!(LabelSelector::parse(&map(&[("zone", bad)])).is_err(), "{bad:?}");
        }
        for bad_key in ["r!a!y.io/market_type", "??==ags!", "-bad-key-", "Ray.io/x", "/x"] {
            assert!(LabelSelector::parse(&map(&[(bad_key, "a")])).is_err(), "{bad_key:?}");
        }
        assert!(LabelSelector::parse(&map(&[("ray.io/accelerator-type", "in(H100, B200)")])).is_ok());
        assert!(check_node_labels(&map(&[("zone", "us-west-1a"), ("ray.io/node-id", "ab12")])).is_ok());
        assert!(check_node_labels(&map(&[("zone", "a b")])).is_err());
        let shown = LabelSelector::parse(&map(&[("zone", "in(a,b)"), ("tier", "!cpu")])).unwrap().to_string();
        assert_eq!(shown, "{tier!=cpu, zone in (a, b)}");
    }
}
