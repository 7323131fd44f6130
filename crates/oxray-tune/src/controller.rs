//! The trial controller: every trial's status, the resources running trials
//! hold, retries after failures, and the scheduler's decisions. No I/O: the
//! driver loop reports events and carries out the [`Action`]s returned.
//!
//! A trial is PENDING until [`Controller::schedule`] starts it (its resources
//! fit in what is free, and fewer than `max_concurrent` run), RUNNING until it
//! ends (TERMINATED) or fails: a failure sends it back to PENDING, restarted
//! from its latest checkpoint, until `max_failures` is spent (ERROR).

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
}

#[derive(Debug)]
struct Trial {
    status: TrialStatus,
    resources: Resources,
    failures: u32,
    has_checkpoint: bool,
}

#[derive(Debug)]
pub struct Controller {
    config: Config,
    trials: Vec<Trial>,
    in_use: Resources,
    scheduler: Scheduler,
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
        Ok(Controller { config, trials: Vec::new(), in_use: Resources::new(), scheduler })
    }

    /// A new PENDING trial asking for `resources`; its index. `Err` when it could never run here.
    pub fn add_trial(&mut self, resources: Resources) -> Result<u32, TuneError> {
        check_amounts(&resources)?;
        let trial = self.trials.len() as u32;
        if !resources::fits(&resources, &self.config.capacity) {
            return Err(TuneError::NeverFits { trial, asks: resources, capacity: self.config.capacity.clone() });
        }
        self.trials.push(Trial { status: TrialStatus::Pending, resources, failures: 0, has_checkpoint: false });
        self.scheduler.on_trial_added(trial);
        Ok(trial)
    }

    /// Starts the PENDING trials that fit, oldest first (a smaller one may pass a larger one that
    /// does not fit yet).
    pub fn schedule(&mut self) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut running = self.count(TrialStatus::Running) as u32;
        for (index, trial) in self.trials.iter_mut().enumerate() {
            if self.config.max_concurrent.is_some_and(|limit| running >= limit) {
                break;
            }
            if trial.status != TrialStatus::Pending {
                continue;
            }
            let mut free = self.config.capacity.clone();
            resources::subtract(&mut free, &self.in_use);
            if !resources::fits(&trial.resources, &free) {
                continue;
            }
            resources::add(&mut self.in_use, &trial.resources);
            trial.status = TrialStatus::Running;
            running += 1;
            actions.push(Action::Start { trial: index as u32, restore: trial.has_checkpoint });
        }
        actions
    }

    /// A result of a RUNNING trial at `time` (its `time_attr`), with the scheduler's metric as a
    /// reward (larger is better); what the scheduler says.
    pub fn on_result(&mut self, trial: u32, time: f64, reward: Option<f64>) -> Result<Decision, TuneError> {
        self.running(trial, "a result")?;
        Ok(match reward {
            Some(reward) => self.scheduler.on_result(trial, time, reward),
            None => Decision::Continue,
        })
    }

    /// The trial saved a checkpoint: a retry restarts from it.
    pub fn on_checkpoint(&mut self, trial: u32) -> Result<(), TuneError> {
        self.running(trial, "a checkpoint")?;
        self.trials[trial as usize].has_checkpoint = true;
        Ok(())
    }

    /// The trial's run ended (it returned, a stop condition or the scheduler stopped it): TERMINATED.
    pub fn on_ended(&mut self, trial: u32) -> Result<(), TuneError> {
        self.running(trial, "an end")?;
        self.release(trial, TrialStatus::Terminated);
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
        resources::subtract(&mut self.in_use, &t.resources);
        t.status = status;
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
