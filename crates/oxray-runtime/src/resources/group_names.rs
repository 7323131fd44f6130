//! Ray's resource names for placement groups: the one place they are built and read.
//!
//! A committed bundle adds its resources to its node under the group's names:
//! `CPU_group_<i>_<pg>` for bundle `i`, `CPU_group_<pg>` for any bundle of the group,
//! and the markers `bundle_group_<i>_<pg>` / `bundle_group_<pg>` (`<pg>` is the group
//! id in hex). `ray.available_resources()` shows them as they are. A task or actor
//! whose spec names a group (`TaskSpec.placement_group`) asks for its resources as the
//! user wrote them; the agent turns that request into the same names when it queues
//! it ([`in_group`]), so the ordinary scheduler places it on the group's bundles.

use super::{ResourceSet, SCALE};
use crate::ids::PlacementGroupId;

/// What every group name has between its base name and its bundle index or group.
const GROUP_INFIX: &str = "_group_";

/// The base name of the markers a bundle provides.
const BUNDLE_MARKER: &str = "bundle";

/// Units of `bundle_group_*` a bundle provides.
const BUNDLE_MARKER_UNITS: f64 = 1000.0;

/// Units of `bundle_group_*` a task placed in the group takes: even a request for
/// nothing (`num_cpus=0`) then runs only where the group has a bundle.
const TASK_MARKER_UNITS: f64 = 0.001;

/// `<name>_group_<pg>`: `name` in any bundle of the group.
fn any_bundle_name(name: &str, pg_hex: &str) -> String {
    format!("{name}{GROUP_INFIX}{pg_hex}")
}

/// `<name>_group_<index>_<pg>`: `name` in bundle `index` of the group.
fn one_bundle_name(name: &str, index: u32, pg_hex: &str) -> String {
    format!("{name}{GROUP_INFIX}{index}_{pg_hex}")
}

fn add_units(set: &mut ResourceSet, name: String, units: i64) {
    let total = set.0.entry(name).or_insert(0);
    *total = total.saturating_add(units);
}

fn units(quantity: f64) -> i64 {
    (quantity * SCALE).round() as i64
}

/// The resources a committed bundle adds to its node, under the group's names.
pub fn bundle_resources(group: &PlacementGroupId, index: u32, bundle: &ResourceSet) -> ResourceSet {
    let pg_hex = group.hex();
    let mut out = ResourceSet::new();
    for (name, units) in &bundle.0 {
        add_units(&mut out, one_bundle_name(name, index, &pg_hex), *units);
        add_units(&mut out, any_bundle_name(name, &pg_hex), *units);
    }
    add_units(&mut out, one_bundle_name(BUNDLE_MARKER, index, &pg_hex), units(BUNDLE_MARKER_UNITS));
    add_units(&mut out, any_bundle_name(BUNDLE_MARKER, &pg_hex), units(BUNDLE_MARKER_UNITS));
    out
}

/// Moves `bundle` from `available` into `group`'s bundle `index`: its resources
/// under the group's names, in `total` and `available`.
pub fn hold_bundle(
    total: &mut ResourceSet,
    available: &mut ResourceSet,
    group: &PlacementGroupId,
    index: u32,
    bundle: &ResourceSet,
) {
    let named = bundle_resources(group, index, bundle);
    available.subtract(bundle);
    total.add(&named);
    available.add(&named);
}

/// A request as drawn from `group`: each name `X` becomes `X_group_<pg>` and, for one
/// bundle (`bundle`: Ray's `placement_group_bundle_index`, None for any), also
/// `X_group_<i>_<pg>`; the group's markers are added, a thousandth each.
pub fn in_group(request: &ResourceSet, group: &PlacementGroupId, bundle: Option<u32>) -> ResourceSet {
    let pg_hex = group.hex();
    let mut out = ResourceSet::new();
    let marker = units(TASK_MARKER_UNITS);
    let names = request.0.iter().map(|(name, units)| (name.as_str(), *units));
    for (name, units) in names.chain([(BUNDLE_MARKER, marker)]) {
        add_units(&mut out, any_bundle_name(name, &pg_hex), units);
        if let Some(index) = bundle {
            add_units(&mut out, one_bundle_name(name, index, &pg_hex), units);
        }
    }
    out
}

/// Whether `name` is one of a placement group's names.
pub fn is_group_name(name: &str) -> bool {
    name.contains(GROUP_INFIX)
}

/// Whether `set` asks for (or holds) resources of any placement group.
pub fn uses_any_group(set: &ResourceSet) -> bool {
    set.names().any(is_group_name)
}

/// Whether `name` is one of `group`'s names.
pub fn is_name_of(name: &str, group: &PlacementGroupId) -> bool {
    is_group_name(name) && name.ends_with(&group.hex())
}

/// Whether `set` asks for (or holds) resources of `group`.
pub fn uses_group(set: &ResourceSet, group: &PlacementGroupId) -> bool {
    set.names().any(|name| is_name_of(name, group))
}

/// Removes `group`'s names from `set` (the group was removed).
pub fn drop_group(set: &mut ResourceSet, group: &PlacementGroupId) {
    let pg_hex = group.hex();
    set.0.retain(|name, _| !(is_group_name(name) && name.ends_with(&pg_hex)));
}

/// Units of `base` a set holds through any placement group, counted once (by the
/// any-bundle name `<base>_group_<pg>`, which every request in a group has).
fn grouped_units(set: &ResourceSet, base: &str) -> i64 {
    set.0
        .iter()
        .filter(|(name, _)| {
            name.strip_prefix(base)
                .and_then(|rest| rest.strip_prefix(GROUP_INFIX))
                .is_some_and(|pg_hex| !pg_hex.contains('_'))
        })
        .map(|(_, units)| *units)
        .sum()
}

/// GPUs a request takes from this node's devices: plain `GPU` plus GPUs held
/// through a placement group.
pub fn gpu_amount(request: &ResourceSet) -> f64 {
    request.get("GPU") + grouped_units(request, "GPU") as f64 / SCALE
}

/// The CPUs an actor blocked in `get` lends to other work: its plain `CPU` plus the
/// CPUs it holds through a placement group, as plain `CPU`, since the bundle took
/// them from the node's plain pool.
pub fn cpus_to_lend(holds: &ResourceSet) -> ResourceSet {
    let units = holds.0.get("CPU").copied().unwrap_or(0).saturating_add(grouped_units(holds, "CPU"));
    let mut out = ResourceSet::new();
    if units > 0 {
        out.0.insert("CPU".to_string(), units);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::set;
    use super::*;

    fn group() -> PlacementGroupId {
        PlacementGroupId::from_array([0xab; 16])
    }

    fn hex() -> String {
        "ab".repeat(16)
    }

    #[test]
    fn a_bundle_is_named_per_bundle_and_for_any_bundle_with_markers() {
        let named = bundle_resources(&group(), 1, &set(&[("CPU", 2.0), ("GPU", 1.0)]));
        let pg = hex();
        assert_eq!(
            named,
            set(&[
                (&format!("CPU_group_1_{pg}"), 2.0),
                (&format!("CPU_group_{pg}"), 2.0),
                (&format!("GPU_group_1_{pg}"), 1.0),
                (&format!("GPU_group_{pg}"), 1.0),
                (&format!("bundle_group_1_{pg}"), 1000.0),
                (&format!("bundle_group_{pg}"), 1000.0),
            ])
        );
    }

    #[test]
    fn holding_bundles_moves_them_under_the_group_names_and_sums_the_any_bundle_names() {
        let mut total = set(&[("CPU", 4.0)]);
        let mut available = total.clone();
        hold_bundle(&mut total, &mut available, &group(), 0, &set(&[("CPU", 1.0)]));
        hold_bundle(&mut total, &mut available, &group(), 1, &set(&[("CPU", 2.0)]));
        let pg = hex();
        assert_eq!(available.get("CPU"), 1.0);
        assert_eq!(total.get("CPU"), 4.0);
        assert_eq!(available.get(&format!("CPU_group_{pg}")), 3.0);
        assert_eq!(available.get(&format!("CPU_group_1_{pg}")), 2.0);
        assert_eq!(total.get(&format!("bundle_group_{pg}")), 2000.0);
        assert!(uses_group(&total, &group()) && uses_any_group(&total));
        drop_group(&mut total, &group());
        assert_eq!(total, set(&[("CPU", 4.0)]));
        assert!(!uses_any_group(&total));
    }

    #[test]
    fn a_request_in_a_group_asks_for_the_names_a_bundle_provides() {
        let pg = hex();
        let request = set(&[("CPU", 1.0), ("memory", 100.0)]);
        assert_eq!(
            in_group(&request, &group(), None),
            set(&[
                (&format!("CPU_group_{pg}"), 1.0),
                (&format!("memory_group_{pg}"), 100.0),
                (&format!("bundle_group_{pg}"), 0.001),
            ])
        );
        let in_bundle = in_group(&request, &group(), Some(2));
        assert_eq!(in_bundle.get(&format!("CPU_group_2_{pg}")), 1.0);
        assert_eq!(in_bundle.get(&format!("bundle_group_2_{pg}")), 0.001);
        assert_eq!(in_bundle.get(&format!("CPU_group_{pg}")), 1.0);
        // A request for nothing still keeps to the group's nodes.
        assert_eq!(in_group(&ResourceSet::new(), &group(), None), set(&[(&format!("bundle_group_{pg}"), 0.001)]));
        // What bundle 2 provides fits it; bundle 1's does not.
        let (mut total, mut node) = (ResourceSet::new(), request.clone());
        hold_bundle(&mut total, &mut node, &group(), 1, &request);
        assert!(node.fits(&in_group(&request, &group(), None)));
        assert!(node.fits(&in_group(&request, &group(), Some(1))));
        assert!(!node.fits(&in_bundle));
    }

    #[test]
    fn names_are_told_apart_by_group() {
        let other = PlacementGroupId::from_array([0xcd; 16]);
        let name = format!("CPU_group_0_{}", hex());
        assert!(is_group_name(&name) && is_name_of(&name, &group()) && !is_name_of(&name, &other));
        assert!(!is_group_name("CPU") && !is_group_name("accelerator_type:A100"));
    }

    #[test]
    fn gpus_and_lent_cpus_count_a_group_once() {
        let holds = in_group(&set(&[("CPU", 2.0), ("GPU", 1.0)]), &group(), Some(0));
        assert_eq!(gpu_amount(&holds), 1.0);
        assert_eq!(cpus_to_lend(&holds), set(&[("CPU", 2.0)]));
        let plain = set(&[("CPU", 1.5), ("GPU", 0.5)]);
        assert_eq!(gpu_amount(&plain), 0.5);
        assert_eq!(cpus_to_lend(&plain), set(&[("CPU", 1.5)]));
        assert!(cpus_to_lend(&ResourceSet::new()).is_empty());
    }
}
