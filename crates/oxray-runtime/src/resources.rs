//! Resource sets in fixed point (1/10000 units), so fractional requests such as
//! `num_cpus=0.1` add and subtract exactly, as Ray's FixedPoint does.

pub mod group_names;

use std::collections::BTreeMap;
use std::fmt;

const SCALE: f64 = 10_000.0;

/// The largest quantity of one resource (10^14, e.g. 100 TB of `memory` in
/// bytes): sums of such quantities still fit in i64 units.
pub const MAX_QUANTITY: f64 = 1e14;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSet(BTreeMap<String, i64>);

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResourceError {
    #[error("resource {name:?} has invalid quantity {value}: expected a finite number >= 0 and <= {MAX_QUANTITY:e}")]
    Invalid { name: String, value: f64 },
}

fn check_quantity(name: &str, value: f64) -> Result<(), ResourceError> {
    if !value.is_finite() || !(0.0..=MAX_QUANTITY).contains(&value) {
        return Err(ResourceError::Invalid { name: name.to_string(), value });
    }
    Ok(())
}

impl ResourceSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_map<'a>(map: impl IntoIterator<Item = (&'a String, &'a f64)>) -> Result<Self, ResourceError> {
        let mut set = ResourceSet::new();
        for (name, &value) in map {
            set.set(name, value)?;
        }
        Ok(set)
    }

    /// Checks every quantity in `map` without building a set (a submission's fast path).
    pub fn check_map<'a>(map: impl IntoIterator<Item = (&'a String, &'a f64)>) -> Result<(), ResourceError> {
        map.into_iter().try_for_each(|(name, &value)| check_quantity(name, value))
    }

    pub fn set(&mut self, name: &str, value: f64) -> Result<(), ResourceError> {
        check_quantity(name, value)?;
        let units = (value * SCALE).round() as i64;
        if units == 0 {
            self.0.remove(name);
        } else {
            self.0.insert(name.to_string(), units);
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0) as f64 / SCALE
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when every quantity in `request` is available here.
    pub fn fits(&self, request: &ResourceSet) -> bool {
        request.0.iter().all(|(k, v)| self.0.get(k).copied().unwrap_or(0) >= *v)
    }

    /// Names in `request` that this set lacks, with (wanted, have).
    pub fn shortfall(&self, request: &ResourceSet) -> Vec<(String, f64, f64)> {
        request
            .0
            .iter()
            .filter(|(k, v)| self.0.get(*k).copied().unwrap_or(0) < **v)
            .map(|(k, v)| (k.clone(), *v as f64 / SCALE, self.get(k)))
            .collect()
    }

    // Saturating: totals reported by many nodes may sum past i64; a wrap would be a panic in debug builds.
    pub fn subtract(&mut self, request: &ResourceSet) {
        for (k, v) in &request.0 {
            let units = self.0.entry(k.clone()).or_insert(0);
            *units = units.saturating_sub(*v);
        }
    }

    pub fn add(&mut self, request: &ResourceSet) {
        for (k, v) in &request.0 {
            let units = self.0.entry(k.clone()).or_insert(0);
            *units = units.saturating_add(*v);
        }
    }

    pub fn to_map(&self) -> std::collections::HashMap<String, f64> {
        self.0.iter().map(|(k, v)| (k.clone(), *v as f64 / SCALE)).collect()
    }
}

impl ResourceSet {
    /// Drops names `total` does not have (a removed placement group's resources
    /// returned by a task that was still running in it).
    pub fn retain_in(&mut self, total: &ResourceSet) {
        self.0.retain(|k, _| total.0.contains_key(k));
    }

    /// Lowers each quantity to what `cap` has of it (a name `cap` lacks goes).
    pub fn lower_to(&mut self, cap: &ResourceSet) {
        self.0.retain(|k, units| {
            *units = (*units).min(cap.0.get(k).copied().unwrap_or(0));
            *units != 0
        });
    }
}

impl fmt::Display for ResourceSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}: {}", *v as f64 / SCALE)).collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

/// Which GPU indices a task holds, and how much of each: integer requests take
/// whole free GPUs, fractional ones share the first GPU with room.
#[derive(Debug, Clone)]
pub struct GpuSlots {
    free_units: Vec<i64>,
}

impl GpuSlots {
    pub fn new(count: usize) -> Self {
        GpuSlots { free_units: vec![SCALE as i64; count] }
    }

    /// Returns the (index, units) taken, or None if the request can't be met now.
    pub fn acquire(&mut self, gpus: f64) -> Option<Vec<(usize, i64)>> {
        let units = (gpus * SCALE).round() as i64;
        if units <= 0 {
            return Some(Vec::new());
        }
        let whole = SCALE as i64;
        if units >= whole {
            let needed = (units / whole) as usize;
            let free: Vec<usize> =
                (0..self.free_units.len()).filter(|&i| self.free_units[i] == whole).take(needed).collect();
            if free.len() < needed {
                return None;
            }
            for &i in &free {
                self.free_units[i] = 0;
            }
            return Some(free.into_iter().map(|i| (i, whole)).collect());
        }
        let i = (0..self.free_units.len()).find(|&i| self.free_units[i] >= units)?;
        self.free_units[i] -= units;
        Some(vec![(i, units)])
    }

    pub fn release(&mut self, taken: &[(usize, i64)]) {
        for &(i, units) in taken {
            self.free_units[i] += units;
        }
    }
}

/// A set of `(name, quantity)` pairs, for this module's tests and its submodules'.
#[cfg(test)]
pub(crate) fn set(pairs: &[(&str, f64)]) -> ResourceSet {
    let mut s = ResourceSet::new();
    for (k, v) in pairs {
        s.set(k, *v).unwrap();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_off_the_network_are_checked_and_sums_saturate() {
        let mut s = ResourceSet::new();
        for bad in [f64::NAN, f64::INFINITY, -1.0, 1e300, MAX_QUANTITY * 2.0] {
            assert!(s.set("x", bad).is_err(), "{bad} must be refused");
        }
        let max = set(&[("x", MAX_QUANTITY)]);
        let mut total = ResourceSet::new();
        for _ in 0..1000 {
            total.add(&max);
        }
        assert!(total.fits(&max));
        let mut empty = ResourceSet::new();
        for _ in 0..1000 {
            empty.subtract(&max);
        }
        assert!(!empty.fits(&max));
        let group = crate::ids::PlacementGroupId::from_array([0xab; 16]);
        let marked = group_names::bundle_resources(&group, 0, &max);
        assert!(marked.get(&format!("x_group_{}", group.hex())) > 0.0);
    }

    #[test]
    fn fractional_accounting_is_exact() {
        let mut avail = set(&[("CPU", 1.0)]);
        let tenth = set(&[("CPU", 0.1)]);
        for _ in 0..10 {
            assert!(avail.fits(&tenth));
            avail.subtract(&tenth);
        }
        assert!(!avail.fits(&tenth));
        assert_eq!(avail.get("CPU"), 0.0);
        for _ in 0..10 {
            avail.add(&tenth);
        }
        assert_eq!(avail, set(&[("CPU", 1.0)]));
    }

    #[test]
    fn shortfall_names_missing_resources() {
        let total = set(&[("CPU", 2.0)]);
        let req = set(&[("CPU", 4.0), ("GPU", 1.0)]);
        let mut missing = total.shortfall(&req);
        missing.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(missing, vec![("CPU".into(), 4.0, 2.0), ("GPU".into(), 1.0, 0.0)]);
        assert!(total.shortfall(&set(&[("CPU", 2.0)])).is_empty());
    }

    #[test]
    fn rejects_negative_and_nan() {
        let mut s = ResourceSet::new();
        assert!(s.set("CPU", -1.0).is_err());
        assert!(s.set("CPU", f64::NAN).is_err());
        assert!(s.set("CPU", 0.0).is_ok());
        assert!(s.is_empty());
    }

    #[test]
    fn gpu_slots_whole_and_fractional() {
        let mut gpus = GpuSlots::new(2);
        let a = gpus.acquire(0.5).unwrap();
        let b = gpus.acquire(0.5).unwrap();
        assert_eq!(a[0].0, b[0].0, "fractions pack onto one GPU");
        let c = gpus.acquire(1.0).unwrap();
        assert_eq!(c, vec![(1, 10_000)]);
        assert!(gpus.acquire(0.1).is_none());
        gpus.release(&a);
        gpus.release(&b);
        assert_eq!(gpus.acquire(1.0).unwrap(), vec![(0, 10_000)]);
    }
}
