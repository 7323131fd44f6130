//! Synchronous HyperBand (Ray's `HyperBandScheduler`). Trials are dealt into
//! brackets as they are added: each band holds brackets for s = 0, 1, ... up
//! to `s_max`, and bracket s takes `ceil(s_max_1 / (s + 1) * eta^s)` trials
//! that first run `max_t * eta^-s` time units. A trial reaching its bracket's
//! milestone pauses (it gives its resources to the others) until every trial
//! of the bracket has reached it; then successive halving keeps the best
//! `1/eta` (they are unpaused, to run to the next milestone) and stops the
//! rest. After its last halving a bracket's trials stop at the milestone
//! (`stop_last_trials`, else they run on).

use crate::scheduler::Decision;
use std::collections::BTreeMap;

/// `HyperBandScheduler`'s settings (Ray's defaults: 81, 3, true).
#[derive(Clone, Debug, PartialEq)]
pub struct HyperBandSpec {
    pub max_t: f64,
    pub reduction_factor: f64,
    pub stop_last_trials: bool,
}

impl HyperBandSpec {
    /// `Err` names the setting that cannot work.
    pub fn check(&self) -> Result<(), crate::TuneError> {
        let bad = crate::TuneError::bad_setting;
        if !(self.max_t >= 1.0 && self.max_t.is_finite()) {
            return bad("max_t", self.max_t, "a number of 1 or more");
        }
        if !(self.reduction_factor > 1.0 && self.reduction_factor.is_finite()) {
            return bad("reduction_factor", self.reduction_factor, "a number above 1");
        }
        Ok(())
    }
}

/// What a result or a trial's end does: the decision for the trial itself, and the paused trials
/// of its bracket that go on (unpaused) or stop.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Outcome {
    pub decision: Option<Decision>,
    pub unpause: Vec<u32>,
    pub stop: Vec<u32>,
}

#[derive(Debug)]
struct Bracket {
    /// How many trials it takes now (shrinks at each halving).
    n: u32,
    /// The last stage's budget, and the milestone (the budgets so far, summed).
    r: f64,
    milestone: f64,
    halvings_left: u32,
    /// Its trials still in play, with their last `(time, reward)`.
    live: BTreeMap<u32, Option<(f64, f64)>>,
}

impl Bracket {
    fn filled(&self) -> bool {
        self.live.len() as u32 >= self.n
    }

    fn runs_on(&self, trial: u32, stop_last: bool) -> bool {
        if !stop_last && self.halvings_left == 0 {
            return true;
        }
        self.live.get(&trial).copied().flatten().is_none_or(|(time, _)| time < self.milestone)
    }

    /// Every trial in play has reached the milestone.
    fn stage_done(&self) -> bool {
        self.live.values().all(|last| last.is_some_and(|(time, _)| time >= self.milestone))
    }
}

#[derive(Debug)]
pub(crate) struct HyperBand {
    spec: HyperBandSpec,
    /// Brackets per band (Ray's `s_max + 1`).
    s_max_1: u32,
    brackets: Vec<Bracket>,
    /// How many brackets the newest band has.
    in_band: u32,
    bracket_of: BTreeMap<u32, usize>,
}

impl HyperBand {
    pub(crate) fn new(spec: HyperBandSpec) -> Self {
        let s_max_1 = (spec.max_t.ln() / spec.reduction_factor.ln()).round() as u32 + 1;
        HyperBand { spec, s_max_1, brackets: Vec::new(), in_band: 0, bracket_of: BTreeMap::new() }
    }

    /// Puts a new trial in the newest bracket, opening the next one (or band) when that is full.
    pub(crate) fn add(&mut self, trial: u32) {
        let eta = self.spec.reduction_factor;
        if self.brackets.last().is_none_or(Bracket::filled) {
            loop {
                if self.in_band == self.s_max_1 {
                    self.in_band = 0;
                }
                let s = self.in_band;
                self.in_band += 1;
                let r0 = (self.spec.max_t * eta.powi(-(s as i32))).floor();
                if r0 == 0.0 {
                    continue; // too small a budget: Ray skips the bracket
                }
                let n0 = (self.s_max_1 as f64 / (s + 1) as f64 * eta.powi(s as i32)).ceil() as u32;
                self.brackets.push(Bracket { n: n0, r: r0, milestone: r0, halvings_left: s, live: BTreeMap::new() });
                break;
            }
        }
        let index = self.brackets.len() - 1;
        self.brackets[index].live.insert(trial, None);
        self.bracket_of.insert(trial, index);
    }

    pub(crate) fn on_result(&mut self, trial: u32, time: f64, reward: f64) -> Outcome {
        let Some(&index) = self.bracket_of.get(&trial) else { return Outcome::default() };
        let bracket = &mut self.brackets[index];
        if !bracket.live.contains_key(&trial) {
            return Outcome { decision: Some(Decision::Stop), ..Outcome::default() };
        }
        bracket.live.insert(trial, Some((time, reward)));
        if bracket.runs_on(trial, self.spec.stop_last_trials) {
            return Outcome { decision: Some(Decision::Continue), ..Outcome::default() };
        }
        self.process(index, Some(trial))
    }

    /// The trial left the experiment (it ended, or errored for good): its bracket may go on without it.
    pub(crate) fn on_removed(&mut self, trial: u32) -> Outcome {
        let Some(&index) = self.bracket_of.get(&trial) else { return Outcome::default() };
        if self.brackets[index].live.remove(&trial).is_none() || self.brackets[index].live.is_empty() {
            return Outcome::default();
        }
        self.process(index, None)
    }

    /// At a milestone: pause `current` until the whole bracket is there; then halve.
    fn process(&mut self, index: usize, current: Option<u32>) -> Outcome {
        let eta = self.spec.reduction_factor;
        let stop_last = self.spec.stop_last_trials;
        let max_t = self.spec.max_t;
        let bracket = &mut self.brackets[index];
        let mut outcome = Outcome { decision: current.map(|_| Decision::Pause), ..Outcome::default() };
        if !bracket.stage_done() {
            return outcome;
        }
        let decide = |outcome: &mut Outcome, trial: u32, keep: bool| {
            if Some(trial) == current {
                outcome.decision = Some(if keep { Decision::Continue } else { Decision::Stop });
            } else if keep {
                outcome.unpause.push(trial);
            } else {
                outcome.stop.push(trial);
            }
        };
        if bracket.halvings_left == 0 {
            if stop_last {
                for trial in std::mem::take(&mut bracket.live).into_keys() {
                    decide(&mut outcome, trial, false);
                }
            }
            return outcome;
        }
        bracket.halvings_left -= 1;
        bracket.n = (bracket.n as f64 / eta).ceil() as u32;
        bracket.r = (bracket.r * eta).min(max_t - bracket.milestone).floor();
        bracket.milestone += bracket.r;
        let mut ranked: Vec<(u32, f64)> = bracket
            .live
            .iter()
            .map(|(t, last)| (*t, last.map(|(_, reward)| reward).unwrap_or(f64::NEG_INFINITY)))
            .collect();
        // Best first; equal rewards keep the older trial.
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let keep = bracket.n as usize;
        for (rank, (trial, _)) in ranked.into_iter().enumerate() {
            if rank >= keep {
                bracket.live.remove(&trial);
                decide(&mut outcome, trial, false);
            } else {
                let goes_on = bracket.runs_on(trial, stop_last);
                decide(&mut outcome, trial, goes_on);
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hyperband(max_t: f64, eta: f64) -> HyperBand {
        HyperBand::new(HyperBandSpec { max_t, reduction_factor: eta, stop_last_trials: true })
    }

    #[test]
    fn brackets_take_rays_numbers_of_trials_and_budgets() {
        let mut hb = hyperband(81.0, 3.0);
        for trial in 0..(5 + 8 + 15 + 34 + 81 + 1) {
            hb.add(trial);
        }
        let shapes: Vec<(u32, f64, u32)> =
            hb.brackets.iter().map(|b| (b.live.len() as u32, b.milestone, b.halvings_left)).collect();
        assert_eq!(shapes, [(5, 81.0, 0), (8, 27.0, 1), (15, 9.0, 2), (34, 3.0, 3), (81, 1.0, 4), (1, 81.0, 0)]);
    }

    #[test]
    fn trials_pause_at_the_milestone_and_the_best_third_goes_on() {
        let mut hb = hyperband(9.0, 3.0);
        // s_max_1 = 3: bracket 0 (3 trials to 9), then bracket 1 (5 trials, milestone 3).
        for trial in 0..8 {
            hb.add(trial);
        }
        for time in 1..3 {
            assert_eq!(hb.on_result(3, time as f64, 0.0).decision, Some(Decision::Continue));
        }
        for (trial, reward) in [(3, 0.3), (4, 0.9), (5, 0.1), (6, 0.5)] {
            assert_eq!(hb.on_result(trial, 3.0, reward).decision, Some(Decision::Pause), "trial {trial}");
        }
        // The last one to reach 3 completes the stage: ceil(5/3) = 2 go on, to 3 + min(9, 9 - 3) = 9.
        let outcome = hb.on_result(7, 3.0, 0.7);
        assert_eq!(outcome.decision, Some(Decision::Continue), "the second best is the last to arrive");
        assert_eq!(outcome.unpause, vec![4]);
        assert_eq!(outcome.stop, vec![6, 3, 5]);
        assert_eq!(hb.brackets[1].milestone, 9.0);
        assert_eq!(hb.on_result(4, 9.0, 1.0).decision, Some(Decision::Pause));
        let last = hb.on_result(7, 9.0, 0.8);
        assert_eq!((last.decision, last.stop), (Some(Decision::Stop), vec![4]), "after the last halving all stop");
    }

    #[test]
    fn a_trial_that_leaves_lets_its_bracket_halve() {
        let mut hb = hyperband(9.0, 3.0);
        for trial in 0..8 {
            hb.add(trial);
        }
        for (trial, reward) in [(3, 0.3), (4, 0.9), (5, 0.1), (6, 0.5)] {
            hb.on_result(trial, 3.0, reward);
        }
        let outcome = hb.on_removed(7);
        assert_eq!(outcome.decision, None);
        assert_eq!((outcome.unpause, outcome.stop), (vec![4, 6], vec![3, 5]));
    }
}
