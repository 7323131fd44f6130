//! Resource amounts as the scheduler counts them (`{"CPU": 2, "GPU": 1}`),
//! and Kubernetes quantities (`500m`, `2`, `1Gi`) turned into them.

use std::collections::BTreeMap;

/// Resource name to amount.
pub type ResourceMap = BTreeMap<String, f64>;

/// Slack for float sums (the scheduler counts in 1/10000 units).
const EPSILON: f64 = 1e-6;

/// Whether `have` covers every amount of `want`.
pub fn fits(want: &ResourceMap, have: &ResourceMap) -> bool {
    want.iter().all(|(name, amount)| *amount <= EPSILON || have.get(name).is_some_and(|h| *h + EPSILON >= *amount))
}

/// Takes `want` out of `have` (which must cover it).
pub fn subtract(have: &mut ResourceMap, want: &ResourceMap) {
    for (name, amount) in want {
        if let Some(h) = have.get_mut(name) {
            *h -= amount;
        }
    }
}

/// A Kubernetes quantity as a plain number: `500m` is 0.5, `2Ki` 2048, `1G` 1e9.
pub fn parse_quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let result = value * scale;
    (result.is_finite() && result >= 0.0).then_some(result)
}

/// `{CPU: 2, GPU: 1}`, for messages.
pub fn describe(resources: &ResourceMap) -> String {
    let parts: Vec<String> = resources.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, f64)]) -> ResourceMap {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("1.5"), Some(1.5));
        assert_eq!(parse_quantity("2Ki"), Some(2048.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity("3x"), None);
        assert_eq!(parse_quantity("-1"), None);
    }

    #[test]
    fn fits_needs_every_resource() {
        let node = map(&[("CPU", 2.0), ("GPU", 1.0)]);
        assert!(fits(&map(&[("CPU", 2.0)]), &node));
        assert!(fits(&map(&[("CPU", 1.0), ("GPU", 1.0)]), &node));
        assert!(!fits(&map(&[("CPU", 3.0)]), &node));
        assert!(!fits(&map(&[("TPU", 1.0)]), &node));
        assert!(fits(&map(&[("TPU", 0.0)]), &node), "a zero amount needs nothing");
        let mut left = node.clone();
        subtract(&mut left, &map(&[("CPU", 1.5)]));
        assert_eq!(left["CPU"], 0.5);
    }
}
