//! The trial controller: every trial's status, the resources running trials
//! hold, retries after failures, and the scheduler's decisions. No I/O: the
//! driver loop reports events and carries out the [`Action`]s returned.
//!
//! A trial is PENDING until [`Controller::schedule`] starts it (its resources
//! fit in what is free, and fewer than `max_concurrent` run), RUNNING until it
//! ends (TERMINATED) or fails: a failure sends it back to PENDING, restarted
//! from its latest checkpoint, until `max_failures` is spent (ERROR). A
//! scheduler may pause a RUNNING trial (PAUSED: it holds nothing); it starts
//! again from its latest checkpoint once the scheduler lets it (HyperBand's
//! next stage), or at once when resources free up (PBT, least progress first).
//! A scheduler may also stop a paused trial: the driver learns of it from
//! [`Controller::take_changes`].

use crate::error::TuneError;
use crate::resources::{self, Resources};
pub use crate::scheduler::Decision;
use crate::scheduler::{Scheduler, SchedulerSpec};

/// An experiment's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// What all trials together may hold (the cluster's resources).
    pub capacity: Resources,
    /// At most this many trials run at once; `None` for no limit.
    pub max_concurrent: Option<u32>,
    /// Retries of a failed trial; `None` for no limit (Ray's `-1`).
    pub max_failures: Option<u32>,
    pub scheduler: SchedulerSpec,
}

/// Ray's trial statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrialStatus {
    Pending,
    Running,
    Paused,
    Terminated,
    Error,
}

impl TrialStatus {
    /// Ray's spelling (`PENDING`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TrialStatus::Pending => "PENDING",
            TrialStatus::Running => "RUNNING",
            TrialStatus::Paused => "PAUSED",
            TrialStatus::Terminated => "TERMINATED",
            TrialStatus::Error => "ERROR",
        }
    }

    fn is_finished(self) -> bool {
        matches!(self, TrialStatus::Terminated | TrialStatus::Error)
    }
}

/// What the driver loop does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start the trial's actor; `restore`: from its latest checkpoint (a retry).
    Start { trial: u32, restore: bool },
    /// The trial's Train run, waiting since [`Controller::on_train_demand`], may start its workers.
    Grant { trial: u32 },
}

#[derive(Debug)]
struct Trial {
    status: TrialStatus,
    resources: Resources,
    /// Its resources are Tune's default, so what a Train run in a trial asks for replaces them.
    learns_demand: bool,
    /// Its Train run waits for its workers' resources, which are not counted in use yet.
    waiting: bool,
    failures: u32,
    has_checkpoint: bool,
    /// A PAUSED trial the scheduler lets go on: [`Controller::schedule`] may start it.
    resumable: bool,
    /// Its time (`time_attr`) at its last result.
    progress: f64,
}

#[derive(Debug)]
pub struct Controller {
    config: Config,
    trials: Vec<Trial>,
    in_use: Resources,
    scheduler: Scheduler,
    /// What the last Train run started in a trial holds: the estimate for trials not started yet.
    learned_demand: Option<Resources>,
    /// Trials the scheduler ended while they were paused, for the driver.
    changes: Vec<(u32, TrialStatus)>,
}

impl Controller {
    pub fn new(config: Config) -> Result<Self, TuneError> {
        check_amounts(&config.capacity)?;
        if config.max_concurrent == Some(0) {
            return Err(TuneError::BadSetting {
                what: "max_concurrent_trials",
                value: "0".into(),
                expected: "None for no limit, or 1 or more",
            });
        }
        let scheduler = Scheduler::new(&config.scheduler)?;
        Ok(Controller {
            config,
            trials: Vec::new(),
            in_use: Resources::new(),
            scheduler,
            learned_demand: None,
            changes: Vec::new(),
        })
    }

    /// A new PENDING trial asking for `resources`; its index. `Err` when it could never run here.
    /// `learns_demand`: the resources are Tune's default, to be replaced by what a Train run in
    /// the experiment's trials asks for ([`Controller::on_train_demand`]).
    pub fn add_trial(&mut self, resources: Resources, learns_demand: bool) -> Result<u32, TuneError> {
        check_amounts(&resources)?;
        let trial = self.trials.len() as u32;
        let resources = match (&self.learned_demand, learns_demand) {
            (Some(demand), true) => demand.clone(),
            _ => resources,
        };
        if !resources::fits(&resources, &self.config.capacity) {
            return Err(TuneError::NeverFits { trial, asks: resources, capacity: self.config.capacity.clone() });
        }
        self.trials.push(Trial {
            status: TrialStatus::Pending,
            resources,
            learns_demand,
            waiting: false,
            failures: 0,
            has_checkpoint: false,
            resumable: false,
            progress: 0.0,
        });
        self.scheduler.on_trial_added(trial);
        Ok(trial)
    }

    /// A trial of an experiment being restored, as it was: a finished one (TERMINATED, ERROR) stays
    /// so, any other comes back PENDING. `has_checkpoint`: it restarts from its latest checkpoint.
    pub fn add_restored_trial(
        &mut self,
        resources: Resources,
        learns_demand: bool,
        status: TrialStatus,
        has_checkpoint: bool,
        failures: u32,
    ) -> Result<u32, TuneError> {
        let trial = self.add_trial(resources, learns_demand)?;
        let t = &mut self.trials[trial as usize];
        t.has_checkpoint = has_checkpoint;
        t.failures = failures;
        if status.is_finished() {
            t.status = status;
        }
        Ok(trial)
    }

    /// A RUNNING trial's Train run asks for `demand` (its workers): the trial counts that instead
    /// of its default, and so does every trial of default resources still to start. Returns the
    /// waiting runs that may start their workers now (this one, when it fits); one not among them
    /// waits for a later [`Action::Grant`]. So a
    /// trial never holds CPUs its own Train run then waits for (Ray's deadlock, which needs a
    /// hand-set `max_concurrent_trials`), and a run never waits on a placement group that others hold.
    /// A trial with resources of its own keeps them (its run reserves its workers besides).
    pub fn on_train_demand(&mut self, trial: u32, demand: Resources) -> Result<Vec<u32>, TuneError> {
        self.running(trial, "a Train run's demand")?;
        check_amounts(&demand)?;
        if !self.trials[trial as usize].learns_demand {
            return Ok(vec![trial]);
        }
        let t = &mut self.trials[trial as usize];
        if !t.waiting {
            resources::subtract(&mut self.in_use, &t.resources);
        }
        t.resources = demand.clone();
        t.waiting = true;
        for pending in self.trials.iter_mut().filter(|t| t.learns_demand && t.status == TrialStatus::Pending) {
            pending.resources = demand.clone();
        }
        self.learned_demand = Some(demand);
        Ok(self.grant_waiting())
    }

    /// Lets waiting Train runs go, oldest first, while their workers fit.
    fn grant_waiting(&mut self) -> Vec<u32> {
        let mut granted = Vec::new();
        for (index, t) in self.trials.iter_mut().enumerate() {
            if !(t.waiting && t.status == TrialStatus::Running) {
                continue;
            }
            let mut free = self.config.capacity.clone();
            resources::subtract(&mut free, &self.in_use);
            if resources::fits(&t.resources, &free) {
                resources::add(&mut self.in_use, &t.resources);
                t.waiting = false;
                granted.push(index as u32);
            }
        }
        granted
    }

    /// Lets waiting Train runs go, then starts the PENDING trials and the resumable PAUSED ones that
    /// fit, oldest first (by least progress first under PBT; a smaller one may pass a larger one that
    /// does not fit yet).
    /// Under a driver's scheduler ([`SchedulerSpec::Driver`]) only the grants: the driver starts trials
    /// with [`Controller::start_chosen`].
    pub fn schedule(&mut self) -> Vec<Action> {
        let mut actions: Vec<Action> = self.grant_waiting().into_iter().map(|trial| Action::Grant { trial }).collect();
        if self.scheduler.driver_chooses() {
            return actions;
        }
        let mut running = self.count(TrialStatus::Running) as u32;
        let mut candidates: Vec<usize> = (0..self.trials.len()).filter(|i| self.trials[*i].may_start()).collect();
        if self.scheduler.resumes_least_progress_first() {
            candidates.sort_by(|a, b| self.trials[*a].progress.total_cmp(&self.trials[*b].progress).then(a.cmp(b)));
        }
        for index in candidates {
            if self.config.max_concurrent.is_some_and(|limit| running >= limit) {
                break;
            }
            let trial = &mut self.trials[index];
            let mut free = self.config.capacity.clone();
            resources::subtract(&mut free, &self.in_use);
            if !resources::fits(&trial.resources, &free) {
                continue;
            }
            resources::add(&mut self.in_use, &trial.resources);
            trial.status = TrialStatus::Running;
            trial.resumable = false;
            running += 1;
            actions.push(Action::Start { trial: index as u32, restore: trial.has_checkpoint });
        }
        actions
    }

    /// Starts the PENDING or PAUSED trial the driver's scheduler chose, when it fits in what is free
    /// and fewer than `max_concurrent` trials run; `None` when it must wait.
    pub fn start_chosen(&mut self, trial: u32) -> Result<Option<Action>, TuneError> {
        let status = self.status(trial)?;
        if !matches!(status, TrialStatus::Pending | TrialStatus::Paused) {
            return Err(TuneError::NotStartable { trial, status });
        }
        if !self.has_room_for(trial)? {
            return Ok(None);
        }
        let t = &mut self.trials[trial as usize];
        resources::add(&mut self.in_use, &t.resources);
        t.status = TrialStatus::Running;
        t.resumable = false;
        Ok(Some(Action::Start { trial, restore: t.has_checkpoint }))
    }

    /// Whether the trial could start now: its resources fit in what is free, and fewer than
    /// `max_concurrent` trials run (Ray's `has_resources_for_trial`).
    pub fn has_room_for(&self, trial: u32) -> Result<bool, TuneError> {
        let t = self.trials.get(trial as usize).ok_or(TuneError::UnknownTrial(trial))?;
        let running = self.count(TrialStatus::Running) as u32;
        if self.config.max_concurrent.is_some_and(|limit| running >= limit) {
            return Ok(false);
        }
        let mut free = self.config.capacity.clone();
        resources::subtract(&mut free, &self.in_use);
        Ok(resources::fits(&t.resources, &free))
    }

    /// The driver's scheduler paused the RUNNING trial: it gives back what it holds and waits, PAUSED,
    /// until the scheduler chooses it again.
    pub fn pause(&mut self, trial: u32) -> Result<(), TuneError> {
        self.running(trial, "a pause")?;
        self.trials[trial as usize].resumable = false;
        self.release(trial, TrialStatus::Paused);
        Ok(())
    }

    /// A result of a RUNNING trial at `time` (its `time_attr`), with the scheduler's metric as a
    /// reward (larger is better); what the scheduler says. On [`Decision::Pause`] the trial is
    /// PAUSED already: the driver stops its run.
    pub fn on_result(&mut self, trial: u32, time: f64, reward: Option<f64>) -> Result<Decision, TuneError> {
        self.running(trial, "a result")?;
        self.trials[trial as usize].progress = time;
        let Some(reward) = reward else { return Ok(Decision::Continue) };
        let trials = &self.trials;
        let has_checkpoint = |t: u32| trials.get(t as usize).is_some_and(|t| t.has_checkpoint);
        let others_wait = trials.iter().enumerate().any(|(i, t)| i as u32 != trial && t.may_start());
        let outcome = self.scheduler.on_result(trial, time, reward, has_checkpoint, others_wait);
        let decision = outcome.decision.unwrap_or(Decision::Continue);
        if decision == Decision::Pause {
            // PBT's pause makes room for others, and it may come back as soon as there is room.
            self.trials[trial as usize].resumable = self.scheduler.resumes_least_progress_first();
            self.release(trial, TrialStatus::Paused);
        }
        self.apply(outcome);
        Ok(decision)
    }

    /// Carries out what the scheduler did to paused trials besides the one it answered.
    fn apply(&mut self, outcome: crate::scheduler::Outcome) {
        for trial in outcome.unpause {
            if let Some(t) = self.trials.get_mut(trial as usize)
                && t.status == TrialStatus::Paused
            {
                t.resumable = true;
            }
        }
        for trial in outcome.stop {
            if let Some(t) = self.trials.get_mut(trial as usize)
                && matches!(t.status, TrialStatus::Paused | TrialStatus::Pending)
            {
                t.status = TrialStatus::Terminated;
                t.resumable = false;
                self.changes.push((trial, TrialStatus::Terminated));
            }
        }
    }

    /// The trials the scheduler ended without the driver (paused ones it stopped), with their new
    /// status, since the last call.
    pub fn take_changes(&mut self) -> Vec<(u32, TrialStatus)> {
        std::mem::take(&mut self.changes)
    }

    /// PBT: the RUNNING trial is restarted from another's checkpoint (which the driver copied into
    /// its own): it gives back what it holds and is PENDING, to start again from that checkpoint.
    pub fn on_exploit(&mut self, trial: u32) -> Result<(), TuneError> {
        self.running(trial, "an exploit")?;
        self.trials[trial as usize].has_checkpoint = true;
        self.release(trial, TrialStatus::Pending);
        Ok(())
    }

    /// The trial saved a checkpoint: a retry restarts from it.
    pub fn on_checkpoint(&mut self, trial: u32) -> Result<(), TuneError> {
        self.running(trial, "a checkpoint")?;
        self.trials[trial as usize].has_checkpoint = true;
        Ok(())
    }

    /// The trial's run ended (it returned, a stop condition or the scheduler stopped it), or a
    /// stop condition or the driver's scheduler ended it while paused or pending: TERMINATED.
    pub fn on_ended(&mut self, trial: u32) -> Result<(), TuneError> {
        match self.status(trial)? {
            TrialStatus::Paused | TrialStatus::Pending => {
                let t = &mut self.trials[trial as usize];
                t.status = TrialStatus::Terminated;
                t.resumable = false;
            }
            _ => {
                self.running(trial, "an end")?;
                self.release(trial, TrialStatus::Terminated);
            }
        }
        let outcome = self.scheduler.on_removed(trial);
        self.apply(outcome);
        Ok(())
    }

    /// The trial's run failed: PENDING again while retries are left, else ERROR. Its new status.
    pub fn on_failed(&mut self, trial: u32) -> Result<TrialStatus, TuneError> {
        self.running(trial, "a failure")?;
        let failures = {
            let t = &mut self.trials[trial as usize];
            t.failures += 1;
            t.failures
        };
        let retry = self.config.max_failures.is_none_or(|most| failures <= most);
        let status = if retry { TrialStatus::Pending } else { TrialStatus::Error };
        self.release(trial, status);
        if status == TrialStatus::Error {
            let outcome = self.scheduler.on_removed(trial);
            self.apply(outcome);
        }
        Ok(status)
    }

    /// Ends every trial not finished yet (the experiment's time budget ran out, or a stopper
    /// ended it): PENDING ones never start. The RUNNING ones, for the driver to stop.
    pub fn stop_all(&mut self) -> Vec<u32> {
        let mut running = Vec::new();
        for index in 0..self.trials.len() {
            match self.trials[index].status {
                TrialStatus::Running => {
                    running.push(index as u32);
                    self.release(index as u32, TrialStatus::Terminated);
                }
                TrialStatus::Pending | TrialStatus::Paused => self.trials[index].status = TrialStatus::Terminated,
                _ => {}
            }
        }
        running
    }

    pub fn status(&self, trial: u32) -> Result<TrialStatus, TuneError> {
        self.trials.get(trial as usize).map(|t| t.status).ok_or(TuneError::UnknownTrial(trial))
    }

    pub fn failures(&self, trial: u32) -> Result<u32, TuneError> {
        self.trials.get(trial as usize).map(|t| t.failures).ok_or(TuneError::UnknownTrial(trial))
    }

    pub fn count(&self, status: TrialStatus) -> usize {
        self.trials.iter().filter(|t| t.status == status).count()
    }

    /// Every trial added so far is TERMINATED or ERROR.
    pub fn all_finished(&self) -> bool {
        self.trials.iter().all(|t| t.status.is_finished())
    }

    /// What RUNNING trials hold now.
    pub fn in_use(&self) -> &Resources {
        &self.in_use
    }

    fn running(&self, trial: u32, event: &'static str) -> Result<(), TuneError> {
        let status = self.status(trial)?;
        if status != TrialStatus::Running {
            return Err(TuneError::NotRunning { trial, status, event });
        }
        Ok(())
    }

    fn release(&mut self, trial: u32, status: TrialStatus) {
        let t = &mut self.trials[trial as usize];
        if !t.waiting {
            resources::subtract(&mut self.in_use, &t.resources);
        }
        t.waiting = false;
        t.status = status;
    }
}

impl Trial {
    /// PENDING, or PAUSED and let go on.
    fn may_start(&self) -> bool {
        self.status == TrialStatus::Pending || (self.status == TrialStatus::Paused && self.resumable)
    }
}

fn check_amounts(resources: &Resources) -> Result<(), TuneError> {
    for (name, value) in resources {
        if !(value.is_finite() && *value >= 0.0) {
            return Err(TuneError::BadAmount { name: name.clone(), value: *value });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
