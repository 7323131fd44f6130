//! Placement-group planning: which node each bundle goes to, by strategy.
//! Pure functions over the head's view of the nodes.

use crate::resources::ResourceSet;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Pack,
    Spread,
    StrictPack,
    StrictSpread,
}

/// A placement strategy a request named that is not one of Ray's four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    #[error("unknown placement strategy {0:?}: expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")]
    Unknown(String),
    #[error("no placement strategy given: expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")]
    Unspecified,
}

impl Strategy {
    /// The strategy a request names; `Unspecified` is refused.
    pub fn from_proto(strategy: oxray_proto::PlacementStrategy) -> Result<Self, StrategyError> {
        use oxray_proto::PlacementStrategy as P;
        match strategy {
            P::Pack => Ok(Strategy::Pack),
            P::Spread => Ok(Strategy::Spread),
            P::StrictPack => Ok(Strategy::StrictPack),
            P::StrictSpread => Ok(Strategy::StrictSpread),
            P::Unspecified => Err(StrategyError::Unspecified),
        }
    }

    pub fn to_proto(self) -> oxray_proto::PlacementStrategy {
        use oxray_proto::PlacementStrategy as P;
        match self {
            Strategy::Pack => P::Pack,
            Strategy::Spread => P::Spread,
            Strategy::StrictPack => P::StrictPack,
            Strategy::StrictSpread => P::StrictSpread,
        }
    }

    /// Ray's name of the strategy.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Pack => "PACK",
            Strategy::Spread => "SPREAD",
            Strategy::StrictPack => "STRICT_PACK",
            Strategy::StrictSpread => "STRICT_SPREAD",
        }
    }

    /// The strategy with Ray's name `name`.
    pub fn parse(name: &str) -> Result<Self, StrategyError> {
        match name {
            "PACK" => Ok(Strategy::Pack),
            "SPREAD" => Ok(Strategy::Spread),
            "STRICT_PACK" => Ok(Strategy::StrictPack),
            "STRICT_SPREAD" => Ok(Strategy::StrictSpread),
            other => Err(StrategyError::Unknown(other.to_string())),
        }
    }
}

/// Ray's `topology_strategy={<label>: "STRICT_PACK"}`: with `pack_label` set, the
/// whole group goes onto nodes that share one value of that label (a node without
/// it takes no bundle). `plan_within(in_domain)` plans with the nodes `in_domain`
/// allows; the label's values are tried in the order they first appear in
/// `node_labels` (the nodes' preference order). Without a label: one plan, anywhere.
pub fn plan_in_domains(
    pack_label: &str,
    node_labels: &[&HashMap<String, String>],
    plan_within: impl Fn(&dyn Fn(usize) -> bool) -> Option<Vec<usize>>,
) -> Option<Vec<usize>> {
    if pack_label.is_empty() {
        return plan_within(&|_| true);
    }
    let mut domains: Vec<&str> = Vec::new();
    for labels in node_labels {
        if let Some(value) = labels.get(pack_label)
            && !domains.contains(&value.as_str())
        {
            domains.push(value);
        }
    }
    domains.into_iter().find_map(|domain| plan_within(&|n| node_labels[n].get(pack_label).is_some_and(|v| v == domain)))
}

/// The node index for each bundle, or `None` when the live nodes cannot hold
/// the group right now. `nodes` are the available resources of live nodes, in
/// preference order; `allowed(bundle, node)` says whether a bundle may go to a node
/// (its `bundle_label_selector`).
pub fn plan(
    strategy: Strategy,
    bundles: &[ResourceSet],
    nodes: &[ResourceSet],
    allowed: &dyn Fn(usize, usize) -> bool,
) -> Option<Vec<usize>> {
    let mut free: Vec<ResourceSet> = nodes.to_vec();
    let mut sum = ResourceSet::new();
    for b in bundles {
        sum.add(b);
    }
    let fits = |free: &[ResourceSet], b: usize, i: usize| allowed(b, i) && free[i].fits(&bundles[b]);
    let all_allowed = |i: usize| (0..bundles.len()).all(|b| allowed(b, i));
    let one_node =
        || nodes.iter().enumerate().position(|(i, n)| all_allowed(i) && n.fits(&sum)).map(|i| vec![i; bundles.len()]);
    match strategy {
        Strategy::StrictPack => one_node(),
        Strategy::Pack => one_node().or_else(|| {
            let mut out = Vec::new();
            for (b, bundle) in bundles.iter().enumerate() {
                // Fill the nodes already used first.
                let i = out
                    .iter()
                    .copied()
                    .find(|&i: &usize| fits(&free, b, i))
                    .or_else(|| (0..free.len()).find(|&i| fits(&free, b, i)))?;
                free[i].subtract(bundle);
                out.push(i);
            }
            Some(out)
        }),
        Strategy::Spread | Strategy::StrictSpread => {
            let mut out: Vec<usize> = Vec::new();
            for (b, bundle) in bundles.iter().enumerate() {
                let unused = (0..free.len()).find(|i| !out.contains(i) && fits(&free, b, *i));
                let i = match (unused, strategy) {
                    (Some(i), _) => i,
                    (None, Strategy::StrictSpread) => return None,
                    (None, _) => {
                        // Every node has a bundle: the one holding the fewest that fits.
                        (0..free.len())
                            .filter(|i| fits(&free, b, *i))
                            .min_by_key(|i| out.iter().filter(|j| *j == i).count())?
                    }
                };
                free[i].subtract(bundle);
                out.push(i);
            }
            Some(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: fn(usize, usize) -> bool = |_, _| true;

    fn cpus(n: f64) -> ResourceSet {
        let mut r = ResourceSet::new();
        r.set("CPU", n).unwrap();
        r
    }

    #[test]
    fn a_pack_label_keeps_the_group_within_one_domain() {
        let label = |v: &str| HashMap::from([("rack".to_string(), v.to_string())]);
        let (a, b, none) = (label("a"), label("b"), HashMap::new());
        // Rack a has one free CPU, rack b two (over two nodes), one node has no rack.
        let nodes = [cpus(1.0), cpus(4.0), cpus(1.0), cpus(1.0)];
        let labels = [&a, &none, &b, &b];
        let two = [cpus(1.0), cpus(1.0)];
        let within = |in_domain: &dyn Fn(usize) -> bool| plan(Strategy::Pack, &two, &nodes, &|_, n| in_domain(n));
        // Rack a cannot hold both and the unlabelled node is in no rack: rack b takes the group.
        assert_eq!(plan_in_domains("rack", &labels, within), Some(vec![2, 3]));
        // No label: the big node holds both.
        assert_eq!(plan_in_domains("", &labels, within), Some(vec![1, 1]));
        // A label no node has: never placed.
        assert_eq!(plan_in_domains("zone", &labels, within), None);
    }

    #[test]
    fn strategies_place_bundles_as_ray_does() {
        let nodes = [cpus(2.0), cpus(2.0), cpus(1.0)];
        let two = [cpus(1.0), cpus(1.0)];
        assert_eq!(plan(Strategy::StrictPack, &two, &nodes, &ANY), Some(vec![0, 0]));
        assert_eq!(plan(Strategy::Pack, &two, &nodes, &ANY), Some(vec![0, 0]));
        assert_eq!(plan(Strategy::Spread, &two, &nodes, &ANY), Some(vec![0, 1]));
        assert_eq!(plan(Strategy::StrictSpread, &[cpus(1.0), cpus(1.0), cpus(1.0)], &nodes, &ANY), Some(vec![0, 1, 2]));
        // More bundles than nodes: STRICT_SPREAD waits, SPREAD doubles up.
        let four = [cpus(1.0), cpus(1.0), cpus(1.0), cpus(1.0)];
        assert_eq!(plan(Strategy::StrictSpread, &four, &nodes, &ANY), None);
        assert_eq!(plan(Strategy::Spread, &four, &nodes, &ANY), Some(vec![0, 1, 2, 0]));
        // PACK spills over when no node holds the whole group; STRICT_PACK does not.
        let three = [cpus(2.0), cpus(2.0), cpus(1.0)];
        assert_eq!(plan(Strategy::StrictPack, &three, &nodes, &ANY), None);
        assert_eq!(plan(Strategy::Pack, &three, &nodes, &ANY), Some(vec![0, 1, 2]));
        assert_eq!(plan(Strategy::Pack, &[cpus(3.0)], &nodes, &ANY), None);
        assert!(Strategy::parse("PAKC").unwrap_err().to_string().contains("PAKC"));
    }

    #[test]
    fn bundles_go_only_where_their_labels_allow() {
        let nodes = [cpus(2.0), cpus(2.0), cpus(1.0)];
        let two = [cpus(1.0), cpus(1.0)];
        // Bundle 1 only on node 2: PACK splits, STRICT_PACK cannot.
        let only_last = |b: usize, n: usize| b == 0 || n == 2;
        assert_eq!(plan(Strategy::Pack, &two, &nodes, &only_last), Some(vec![0, 2]));
        assert_eq!(plan(Strategy::StrictPack, &two, &nodes, &only_last), None);
        assert_eq!(plan(Strategy::Spread, &two, &nodes, &|_, n| n == 1), Some(vec![1, 1]));
        assert_eq!(plan(Strategy::StrictSpread, &two, &nodes, &|_, n| n == 1), None);
    }
}
