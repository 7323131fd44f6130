//! Population based training's decision (Ray's `PopulationBasedTraining`,
//! asynchronous): every `perturbation_interval` of a trial's time, past the
//! burn-in, a trial in the bottom `quantile_fraction` of the population's last
//! scores exploits one of the top quantile (the best ones in turn): it
//! restarts from that trial's latest checkpoint with its config explored
//! (which the driver does, in Python, where the mutations are).

use std::collections::BTreeMap;

/// `PopulationBasedTraining`'s settings the engine decides with (Ray's defaults: 60, 0, 0.25).
#[derive(Clone, Debug, PartialEq)]
pub struct PbtSpec {
    pub perturbation_interval: f64,
    pub burn_in_period: f64,
    pub quantile_fraction: f64,
}

impl PbtSpec {
    pub fn check(&self) -> Result<(), crate::TuneError> {
        let bad = crate::TuneError::bad_setting;
        if !(self.perturbation_interval > 0.0 && self.perturbation_interval.is_finite()) {
            return bad("perturbation_interval", self.perturbation_interval, "a number above 0");
        }
        if !(self.burn_in_period >= 0.0 && self.burn_in_period.is_finite()) {
            return bad("burn_in_period", self.burn_in_period, "a number of 0 or more");
        }
        if !(self.quantile_fraction >= 0.0 && self.quantile_fraction <= 0.5) {
            return bad("quantile_fraction", self.quantile_fraction, "a number from 0 to 0.5");
        }
        Ok(())
    }
}

/// What PBT says about a trial at a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PbtVerdict {
    /// Not at a perturbation interval (or within the burn-in).
    Continue,
    /// At an interval, and not in the bottom quantile: it goes on (or pauses for waiting trials).
    Perturbed,
    /// Restart from `source`'s latest checkpoint, its config explored.
    Exploit { source: u32 },
    /// It would exploit `source`, which has no checkpoint yet: skipped (Ray logs it).
    NoCheckpoint { source: u32 },
}

#[derive(Debug)]
pub(crate) struct Pbt {
    spec: PbtSpec,
    /// Each trial's time at its last perturbation and its score then.
    last_perturbation: BTreeMap<u32, f64>,
    scores: BTreeMap<u32, f64>,
    /// Which of the top quantile the next exploit takes (in turn, best first).
    turn: usize,
}

impl Pbt {
    pub(crate) fn new(spec: PbtSpec) -> Self {
        Pbt { spec, last_perturbation: BTreeMap::new(), scores: BTreeMap::new(), turn: 0 }
    }

    /// A result of `trial` at `time` with `reward` (larger is better); `has_checkpoint` says which
    /// trials could be cloned.
    pub(crate) fn on_result(
        &mut self,
        trial: u32,
        time: f64,
        reward: f64,
        has_checkpoint: impl Fn(u32) -> bool,
    ) -> PbtVerdict {
        let last = self.last_perturbation.get(&trial).copied().unwrap_or(0.0);
        if time - last < self.spec.perturbation_interval {
            return PbtVerdict::Continue;
        }
        self.last_perturbation.insert(trial, time);
        self.scores.insert(trial, reward);
        if time < self.spec.burn_in_period {
            return PbtVerdict::Continue;
        }
        let (lower, upper) = self.quantiles();
        if !lower.contains(&trial) || upper.is_empty() {
            return PbtVerdict::Perturbed;
        }
        let source = upper[self.turn % upper.len()];
        self.turn += 1;
        if has_checkpoint(source) { PbtVerdict::Exploit { source } } else { PbtVerdict::NoCheckpoint { source } }
    }

    /// The bottom and top trials by last score (the top best first), `quantile_fraction` of them
    /// each, at most half.
    fn quantiles(&self) -> (Vec<u32>, Vec<u32>) {
        let mut ranked: Vec<(u32, f64)> = self.scores.iter().map(|(t, s)| (*t, *s)).collect();
        if ranked.len() <= 1 {
            return (vec![], vec![]);
        }
        ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut count = (ranked.len() as f64 * self.spec.quantile_fraction).ceil() as usize;
        count = count.min(ranked.len() / 2);
        let lower = ranked[..count].iter().map(|(t, _)| *t).collect();
        let upper = ranked[ranked.len() - count..].iter().rev().map(|(t, _)| *t).collect();
        (lower, upper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pbt(interval: f64, burn_in: f64, fraction: f64) -> Pbt {
        Pbt::new(PbtSpec { perturbation_interval: interval, burn_in_period: burn_in, quantile_fraction: fraction })
    }

    #[test]
    fn the_bottom_quantile_exploits_the_top_at_each_interval() {
        let mut p = pbt(2.0, 0.0, 0.25);
        let all = |_| true;
        for (trial, score) in [(0, 1.0), (1, 5.0), (2, 9.0), (3, 3.0)] {
            assert_eq!(p.on_result(trial, 1.0, score, all), PbtVerdict::Continue, "before the first interval");
            p.on_result(trial, 2.0, score, all);
        }
        // At time 4, trial 0 is the worst of four: it exploits the best, trial 2.
        assert_eq!(p.on_result(0, 4.0, 1.0, all), PbtVerdict::Exploit { source: 2 });
        assert_eq!(p.on_result(2, 4.0, 9.0, all), PbtVerdict::Perturbed, "the best goes on");
        assert_eq!(p.on_result(0, 5.0, 1.0, all), PbtVerdict::Continue, "within its interval again");
        assert_eq!(p.on_result(0, 6.0, 0.5, |t| t != 2), PbtVerdict::NoCheckpoint { source: 2 });
    }

    #[test]
    fn no_exploit_during_the_burn_in_or_alone() {
        let mut p = pbt(1.0, 10.0, 0.5);
        assert_eq!(p.on_result(0, 1.0, 1.0, |_| true), PbtVerdict::Continue);
        assert_eq!(p.on_result(1, 1.0, 9.0, |_| true), PbtVerdict::Continue);
        assert_eq!(p.on_result(0, 2.0, 1.0, |_| true), PbtVerdict::Continue, "burn-in");
        assert_eq!(p.on_result(0, 11.0, 1.0, |_| true), PbtVerdict::Exploit { source: 1 });
        let mut alone = pbt(1.0, 0.0, 0.5);
        assert_eq!(alone.on_result(0, 5.0, 1.0, |_| true), PbtVerdict::Perturbed);
    }
}
