//! Resource amounts by name (`CPU`, `GPU`, custom), as trials ask for them and
//! the cluster offers them.

use std::collections::BTreeMap;

pub type Resources = BTreeMap<String, f64>;

/// Whether `asks` fits in `free`: every amount asked is there (a name `free` lacks offers 0).
pub fn fits(asks: &Resources, free: &Resources) -> bool {
    asks.iter().all(|(name, amount)| *amount <= free.get(name).copied().unwrap_or(0.0) + 1e-9)
}

pub fn add(into: &mut Resources, amounts: &Resources) {
    for (name, amount) in amounts {
        *into.entry(name.clone()).or_default() += amount;
    }
}

pub fn subtract(from: &mut Resources, amounts: &Resources) {
    for (name, amount) in amounts {
        let left = from.entry(name.clone()).or_default();
        *left = (*left - amount).max(0.0);
    }
}

/// `{CPU: 1, GPU: 0.5}`, for messages.
pub fn show(resources: &Resources) -> String {
    let parts: Vec<String> = resources.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", parts.join(", "))
}
