//! Placement-group planning: which node each bundle goes to, by strategy.
//! Pure functions over the head's view of the nodes.

use crate::resources::ResourceSet;

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

/// The node index for each bundle, or `None` when the live nodes cannot hold
/// the group right now. `nodes` are the available resources of live nodes, in preference order.
pub fn plan(strategy: Strategy, bundles: &[ResourceSet], nodes: &[ResourceSet]) -> Option<Vec<usize>> {
    let mut free: Vec<ResourceSet> = nodes.to_vec();
    let mut sum = ResourceSet::new();
    for b in bundles {
        sum.add(b);
    }
    let one_node = || nodes.iter().position(|n| n.fits(&sum)).map(|i| vec![i; bundles.len()]);
    match strategy {
        Strategy::StrictPack => one_node(),
        Strategy::Pack => one_node().or_else(|| {
            let mut out = Vec::new();
            for b in bundles {
                // Fill the nodes already used first.
                let i = out
                    .iter()
                    .copied()
                    .find(|&i: &usize| free[i].fits(b))
                    .or_else(|| free.iter().position(|n| n.fits(b)))?;
                free[i].subtract(b);
                out.push(i);
            }
            Some(out)
        }),
        Strategy::Spread | Strategy::StrictSpread => {
            let mut out: Vec<usize> = Vec::new();
            for b in bundles {
                let unused = (0..free.len()).find(|i| !out.contains(i) && free[*i].fits(b));
                let i = match (unused, strategy) {
                    (Some(i), _) => i,
                    (None, Strategy::StrictSpread) => return None,
                    (None, _) => {
                        // Every node has a bundle: the one holding the fewest that fits.
                        (0..free.len())
                            .filter(|i| free[*i].fits(b))
                            .min_by_key(|i| out.iter().filter(|j| *j == i).count())?
                    }
                };
                free[i].subtract(b);
                out.push(i);
            }
            Some(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: f64) -> ResourceSet {
        let mut r = ResourceSet::new();
        r.set("CPU", n).unwrap();
        r
    }

    #[test]
    fn strategies_place_bundles_as_ray_does() {
        let nodes = [cpus(2.0), cpus(2.0), cpus(1.0)];
        let two = [cpus(1.0), cpus(1.0)];
        assert_eq!(plan(Strategy::StrictPack, &two, &nodes), Some(vec![0, 0]));
        assert_eq!(plan(Strategy::Pack, &two, &nodes), Some(vec![0, 0]));
        assert_eq!(plan(Strategy::Spread, &two, &nodes), Some(vec![0, 1]));
        assert_eq!(plan(Strategy::StrictSpread, &[cpus(1.0), cpus(1.0), cpus(1.0)], &nodes), Some(vec![0, 1, 2]));
        // More bundles than nodes: STRICT_SPREAD waits, SPREAD doubles up.
        let four = [cpus(1.0), cpus(1.0), cpus(1.0), cpus(1.0)];
        assert_eq!(plan(Strategy::StrictSpread, &four, &nodes), None);
        assert_eq!(plan(Strategy::Spread, &four, &nodes), Some(vec![0, 1, 2, 0]));
        // PACK spills over when no node holds the whole group; STRICT_PACK does not.
        let three = [cpus(2.0), cpus(2.0), cpus(1.0)];
        assert_eq!(plan(Strategy::StrictPack, &three, &nodes), None);
        assert_eq!(plan(Strategy::Pack, &three, &nodes), Some(vec![0, 1, 2]));
        assert_eq!(plan(Strategy::Pack, &[cpus(3.0)], &nodes), None);
        assert!(Strategy::parse("PAKC").unwrap_err().to_string().contains("PAKC"));
    }
}
