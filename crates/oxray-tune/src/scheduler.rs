//! The schedulers' decisions on a trial's result: FIFO (never stops a trial),
//! asynchronous successive halving (ASHA, Ray's `AsyncHyperBandScheduler`),
//! the median stopping rule (Ray's `MedianStoppingRule`), and, in their own
//! modules, synchronous HyperBand (`hyperband.rs`) and PBT (`pbt.rs`).
//! A result arrives as the trial's time (`time_attr`'s value) and its reward
//! (the metric, negated for `mode="min"`), so larger is always better here.

pub(crate) use crate::hyperband::Outcome;
use std::collections::BTreeMap;

/// Which scheduler an experiment runs, with its settings.
#[derive(Clone, Debug, PartialEq)]
pub enum SchedulerSpec {
    Fifo,
    /// A `TrialScheduler` of the user's own, in the driver: it decides on results and chooses which
    /// trial runs next; the controller makes no decision and starts only the trials the driver names
    /// ([`crate::Controller::start_chosen`]).
    Driver,
    Asha(AshaSpec),
    Median(MedianSpec),
    Pbt(crate::pbt::PbtSpec),
    HyperBand(crate::hyperband::HyperBandSpec),
}

/// `MedianStoppingRule`'s settings (Ray's defaults: grace period 60, 3 samples).
#[derive(Clone, Debug, PartialEq)]
pub struct MedianSpec {
    /// No trial stops before its time reaches this.
    pub grace_period: f64,
    /// How many other trials must have results by then for a median to count.
    pub min_samples_required: u32,
}

/// `ASHAScheduler`'s settings (Ray's names and defaults: 100, 1, 4, 1, true).
#[derive(Clone, Debug, PartialEq)]
pub struct AshaSpec {
    pub max_t: f64,
    pub grace_period: f64,
    pub reduction_factor: f64,
    pub brackets: u32,
    pub stop_last_trials: bool,
}

impl AshaSpec {
    /// `Err` names the setting that cannot work.
    pub fn check(&self) -> Result<(), crate::TuneError> {
        let bad = crate::TuneError::bad_setting;
        if !(self.grace_period > 0.0 && self.grace_period.is_finite()) {
            return bad("grace_period", self.grace_period, "a number above 0");
        }
        if !(self.max_t >= self.grace_period && self.max_t.is_finite()) {
            return bad("max_t", self.max_t, "a number at least grace_period");
        }
        if !(self.reduction_factor > 1.0 && self.reduction_factor.is_finite()) {
            return bad("reduction_factor", self.reduction_factor, "a number above 1");
        }
        if self.brackets == 0 {
            return bad("brackets", 0.0, "1 or more");
        }
        Ok(())
    }
}

/// What the scheduler says about a trial after a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Continue,
    /// End the trial now (TERMINATED): early stopping, or it reached `max_t`.
    Stop,
    /// Stop the trial's run for now (PAUSED): it gives back what it holds and restarts from its
    /// latest checkpoint when the scheduler lets it go on (HyperBand's milestone; PBT letting
    /// waiting trials run).
    Pause,
    /// PBT: restart the trial from `source`'s latest checkpoint with its config explored; the
    /// driver explores it and reports [`crate::Controller::on_exploit`].
    Exploit {
        source: u32,
    },
    /// PBT would exploit `source`, which has no checkpoint yet: the trial goes on (say so).
    NoCheckpoint {
        source: u32,
    },
}

/// A scheduler's state across the experiment.
#[derive(Debug)]
pub(crate) enum Scheduler {
    Fifo,
    Driver,
    Asha(Asha),
    Median(Median),
    Pbt(crate::pbt::Pbt),
    HyperBand(crate::hyperband::HyperBand),
}

impl Scheduler {
    pub(crate) fn new(spec: &SchedulerSpec) -> Result<Self, crate::TuneError> {
        Ok(match spec {
            SchedulerSpec::Fifo => Scheduler::Fifo,
            SchedulerSpec::Driver => Scheduler::Driver,
            SchedulerSpec::Asha(spec) => {
                spec.check()?;
                Scheduler::Asha(Asha::new(spec.clone()))
            }
            SchedulerSpec::Median(spec) => {
                if !(spec.grace_period >= 0.0 && spec.grace_period.is_finite()) {
                    return crate::TuneError::bad_setting("grace_period", spec.grace_period, "a number of 0 or more");
                }
                Scheduler::Median(Median { spec: spec.clone(), results: BTreeMap::new() })
            }
            SchedulerSpec::Pbt(spec) => {
                spec.check()?;
                Scheduler::Pbt(crate::pbt::Pbt::new(spec.clone()))
            }
            SchedulerSpec::HyperBand(spec) => {
                spec.check()?;
                Scheduler::HyperBand(crate::hyperband::HyperBand::new(spec.clone()))
            }
        })
    }

    pub(crate) fn on_trial_added(&mut self, trial: u32) {
        match self {
            Scheduler::Asha(asha) => asha.assign(trial),
            Scheduler::HyperBand(hyperband) => hyperband.add(trial),
            _ => {}
        }
    }

    /// Whether the driver chooses which trial starts next ([`SchedulerSpec::Driver`]).
    pub(crate) fn driver_chooses(&self) -> bool {
        matches!(self, Scheduler::Driver)
    }

    /// Whether paused trials resume by least progress first (PBT's fair share of time).
    pub(crate) fn resumes_least_progress_first(&self) -> bool {
        matches!(self, Scheduler::Pbt(_))
    }

    /// The trial left the experiment (ended, or errored for good); what that does to paused trials.
    pub(crate) fn on_removed(&mut self, trial: u32) -> Outcome {
        match self {
            Scheduler::HyperBand(hyperband) => hyperband.on_removed(trial),
            _ => Outcome::default(),
        }
    }

    /// `others_wait`: some other trial is waiting to run (PBT then pauses this one at its
    /// perturbation, as Ray's does, so trials beyond the free slots get their share of time).
    pub(crate) fn on_result(
        &mut self,
        trial: u32,
        time: f64,
        reward: f64,
        has_checkpoint: impl Fn(u32) -> bool,
        others_wait: bool,
    ) -> Outcome {
        use crate::pbt::PbtVerdict;
        let decision = match self {
            Scheduler::Fifo | Scheduler::Driver => Decision::Continue,
            Scheduler::Asha(asha) => asha.on_result(trial, time, reward),
            Scheduler::Median(median) => median.on_result(trial, time, reward),
            Scheduler::Pbt(pbt) => match pbt.on_result(trial, time, reward, has_checkpoint) {
                PbtVerdict::Continue => Decision::Continue,
                PbtVerdict::Perturbed if others_wait => Decision::Pause,
                PbtVerdict::Perturbed => Decision::Continue,
                PbtVerdict::Exploit { source } => Decision::Exploit { source },
                PbtVerdict::NoCheckpoint { source } => Decision::NoCheckpoint { source },
            },
            Scheduler::HyperBand(hyperband) => return hyperband.on_result(trial, time, reward),
        };
        Outcome { decision: Some(decision), ..Outcome::default() }
    }
}

/// One bracket: rungs at `grace_period * rf^(k + s)`, highest first, each with the rewards
/// trials had when they reached it.
#[derive(Debug)]
struct Bracket {
    rungs: Vec<(f64, BTreeMap<u32, f64>)>,
}

#[derive(Debug)]
pub(crate) struct Asha {
    spec: AshaSpec,
    brackets: Vec<Bracket>,
    /// Each bracket's share of new trials, and the running credit of the weighted round robin.
    weights: Vec<f64>,
    credit: Vec<f64>,
    bracket_of: BTreeMap<u32, usize>,
}

impl Asha {
    fn new(spec: AshaSpec) -> Self {
        let rf = spec.reduction_factor;
        let max_rungs = ((spec.max_t / spec.grace_period).ln() / rf.ln() + 1.0 + 1e-9).floor() as u32;
        let brackets: Vec<Bracket> = (0..spec.brackets)
            .map(|s| Bracket {
                rungs: (0..max_rungs.saturating_sub(s))
                    .rev()
                    .map(|k| (spec.grace_period * rf.powi((k + s) as i32), BTreeMap::new()))
                    .collect(),
            })
            .collect();
        // Brackets with more rungs get more trials (Ray's softmax over rung counts).
        let most = brackets.iter().map(|b| b.rungs.len()).max().unwrap_or(0) as f64;
        let raw: Vec<f64> = brackets.iter().map(|b| (b.rungs.len() as f64 - most).exp()).collect();
        let total: f64 = raw.iter().sum();
        let weights = raw.iter().map(|w| w / total).collect();
        let credit = vec![0.0; brackets.len()];
        Asha { spec, brackets, weights, credit, bracket_of: BTreeMap::new() }
    }

    /// Smooth weighted round robin: the same sequence every run, each bracket its share.
    fn assign(&mut self, trial: u32) {
        for (credit, weight) in self.credit.iter_mut().zip(&self.weights) {
            *credit += weight;
        }
        let chosen =
            (0..self.credit.len()).fold(0, |best, i| if self.credit[i] > self.credit[best] { i } else { best });
        self.credit[chosen] -= 1.0;
        self.bracket_of.insert(trial, chosen);
    }

    fn on_result(&mut self, trial: u32, time: f64, reward: f64) -> Decision {
        let Some(&index) = self.bracket_of.get(&trial) else { return Decision::Continue };
        let mut decision = Decision::Continue;
        if time >= self.spec.max_t && self.spec.stop_last_trials {
            decision = Decision::Stop;
        }
        let rf = self.spec.reduction_factor;
        for (milestone, recorded) in &mut self.brackets[index].rungs {
            if time < *milestone {
                continue;
            }
            if recorded.contains_key(&trial) {
                break;
            }
            // The first trial at a rung has no cutoff to fall below.
            if let Some(cutoff) = percentile(recorded.values().copied(), (1.0 - 1.0 / rf) * 100.0)
                && reward < cutoff
            {
                decision = Decision::Stop;
            }
            recorded.insert(trial, reward);
            break;
        }
        decision
    }
}

/// The median stopping rule: past the grace period, a trial whose best reward is below the median
/// of the other trials' mean rewards up to the same time stops.
#[derive(Debug)]
pub(crate) struct Median {
    spec: MedianSpec,
    /// Every trial's `(time, reward)` results, finished trials' included.
    results: BTreeMap<u32, Vec<(f64, f64)>>,
}

impl Median {
    fn on_result(&mut self, trial: u32, time: f64, reward: f64) -> Decision {
        self.results.entry(trial).or_default().push((time, reward));
        if time < self.spec.grace_period {
            return Decision::Continue;
        }
        let means: Vec<f64> = self
            .results
            .iter()
            .filter(|(other, _)| **other != trial)
            .filter_map(|(_, results)| {
                let upto: Vec<f64> = results.iter().filter(|(t, _)| *t <= time).map(|(_, r)| *r).collect();
                (!upto.is_empty()).then(|| upto.iter().sum::<f64>() / upto.len() as f64)
            })
            .collect();
        if means.len() < self.spec.min_samples_required as usize {
            return Decision::Continue;
        }
        let best = self.results[&trial].iter().map(|(_, r)| *r).fold(f64::NEG_INFINITY, f64::max);
        match percentile(means.into_iter(), 50.0) {
            Some(median) if best < median => Decision::Stop,
            _ => Decision::Continue,
        }
    }
}

/// numpy's `nanpercentile` with linear interpolation; `None` when there is no number.
pub(crate) fn percentile(values: impl Iterator<Item = f64>, q: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = values.filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let position = q / 100.0 * (sorted.len() - 1) as f64;
    let (low, high) = (position.floor() as usize, position.ceil() as usize);
    Some(sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asha(max_t: f64, grace: f64, rf: f64, brackets: u32) -> Asha {
        Asha::new(AshaSpec { max_t, grace_period: grace, reduction_factor: rf, brackets, stop_last_trials: true })
    }

    #[test]
    fn percentile_interpolates_as_numpy() {
        assert_eq!(percentile([1.0, 2.0, 3.0, 4.0].into_iter(), 75.0), Some(3.25));
        assert_eq!(percentile([f64::NAN, 5.0].into_iter(), 50.0), Some(5.0));
        assert_eq!(percentile(std::iter::empty(), 50.0), None);
    }

    #[test]
    fn rungs_are_grace_period_times_powers_of_the_reduction_factor() {
        let a = asha(100.0, 1.0, 4.0, 1);
        let milestones: Vec<f64> = a.brackets[0].rungs.iter().map(|r| r.0).collect();
        assert_eq!(milestones, [64.0, 16.0, 4.0, 1.0]);
        let two = asha(100.0, 1.0, 4.0, 2);
        let second: Vec<f64> = two.brackets[1].rungs.iter().map(|r| r.0).collect();
        assert_eq!(second, [64.0, 16.0, 4.0]);
    }

    #[test]
    fn a_trial_below_the_rungs_cutoff_stops_and_the_first_never_does() {
        let mut a = asha(10.0, 1.0, 2.0, 1);
        for trial in 0..3 {
            a.assign(trial);
        }
        // Rung 1: trial 0 arrives first (no cutoff), trial 1 better, trial 2 below the median.
        assert_eq!(a.on_result(0, 1.0, 0.1), Decision::Continue);
        assert_eq!(a.on_result(1, 1.0, 0.9), Decision::Continue);
        assert_eq!(a.on_result(2, 1.0, 0.2), Decision::Stop, "0.2 is below the median of 0.1 and 0.9");
        // A later result between rungs decides nothing; reaching max_t stops.
        assert_eq!(a.on_result(1, 1.5, 0.0), Decision::Continue);
        assert_eq!(a.on_result(1, 10.0, 1.0), Decision::Stop);
    }

    #[test]
    fn the_median_rule_stops_a_trial_whose_best_is_below_the_others_median_after_the_grace_period() {
        let mut m =
            Median { spec: MedianSpec { grace_period: 2.0, min_samples_required: 2 }, results: BTreeMap::new() };
        for trial in 0..2 {
            for t in 1..=3 {
                assert_eq!(m.on_result(trial, t as f64, 10.0), Decision::Continue);
            }
        }
        assert_eq!(m.on_result(2, 1.0, 1.0), Decision::Continue, "within the grace period");
        assert_eq!(m.on_result(2, 2.0, 1.0), Decision::Stop, "best 1 is below the others' median mean of 10");
        assert_eq!(m.on_result(3, 2.0, 12.0), Decision::Continue);
        let mut few =
            Median { spec: MedianSpec { grace_period: 0.0, min_samples_required: 3 }, results: BTreeMap::new() };
        few.on_result(0, 1.0, 10.0);
        assert_eq!(few.on_result(1, 1.0, 0.0), Decision::Continue, "one other trial is fewer than 3 samples");
    }

    #[test]
    fn brackets_share_trials_by_their_rung_counts() {
        let mut a = asha(100.0, 1.0, 4.0, 2);
        for trial in 0..100 {
            a.assign(trial);
        }
        let in_first = a.bracket_of.values().filter(|b| **b == 0).count();
        // e^0 / (e^0 + e^-1) = 0.73
        assert!((70..=76).contains(&in_first), "{in_first}");
    }
}
