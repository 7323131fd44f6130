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

impl LabelSelector {
    pub fn parse(selector: &HashMap<String, String>) -> Result<Self, LabelError> {
        let mut conditions = Vec::with_capacity(selector.len());
        for (key, raw) in selector {
            let err = |reason| LabelError { key: key.clone(), value: raw.clone(), reason };
            if key.trim().is_empty() {
                return Err(err("label keys must not be empty"));
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
        if value.starts_with('!') || value.contains(['(', ')', ',']) {
            return Err(format!(
                "node label {key:?}={value:?}: a value must not start with '!' or contain '(', ')' or ','"
            ));
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
        for bad in ["", "in()", "in(a,)", "a,b", "!"] {
            assert!(LabelSelector::parse(&map(&[("zone", bad)])).is_err(), "{bad:?}");
        }
        let shown = LabelSelector::parse(&map(&[("zone", "in(a,b)"), ("tier", "!cpu")])).unwrap().to_string();
        assert_eq!(shown, "{tier!=cpu, zone in (a, b)}");
    }
}
