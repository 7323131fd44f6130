//! The controller's life of a trial: scheduling within resources and the
//! concurrency limit, ends, retries, and stopping the experiment.

use super::*;
use crate::scheduler::AshaSpec;

fn cpus(n: f64) -> Resources {
    Resources::from([("CPU".to_string(), n)])
}

fn controller(capacity: f64, max_concurrent: Option<u32>, max_failures: Option<u32>) -> Controller {
    Controller::new(Config { capacity: cpus(capacity), max_concurrent, max_failures, scheduler: SchedulerSpec::Fifo })
        .unwrap()
}

fn started(actions: &[Action]) -> Vec<u32> {
    actions.iter().filter_map(|a| if let Action::Start { trial, .. } = a { Some(*trial) } else { None }).collect()
}

fn granted(actions: &[Action]) -> Vec<u32> {
    actions.iter().filter_map(|a| if let Action::Grant { trial } = a { Some(*trial) } else { None }).collect()
}

#[test]
fn trials_start_as_resources_free_up_oldest_first() {
    let mut c = controller(2.0, None, Some(0));
    for _ in 0..4 {
        c.add_trial(cpus(1.0), false).unwrap();
    }
    assert_eq!(started(&c.schedule()), [0, 1]);
    assert_eq!(c.schedule(), [], "nothing more fits");
    c.on_ended(1).unwrap();
    assert_eq!(started(&c.schedule()), [2]);
    assert_eq!(c.in_use(), &cpus(2.0));
    c.on_ended(0).unwrap();
    c.on_ended(2).unwrap();
    assert_eq!(started(&c.schedule()), [3]);
    c.on_ended(3).unwrap();
    assert!(c.all_finished());
    assert_eq!(c.count(TrialStatus::Terminated), 4);
}

#[test]
fn max_concurrent_caps_running_trials_and_a_smaller_trial_passes_a_larger_one() {
    let mut c = controller(4.0, Some(2), Some(0));
    c.add_trial(cpus(3.0), false).unwrap();
    c.add_trial(cpus(2.0), false).unwrap();
    c.add_trial(cpus(1.0), false).unwrap();
    assert_eq!(started(&c.schedule()), [0, 2], "trial 1 does not fit beside trial 0; trial 2 does");
    c.on_ended(2).unwrap();
    assert_eq!(c.schedule(), [], "trial 1 still does not fit");
    c.on_ended(0).unwrap();
    assert_eq!(started(&c.schedule()), [1]);
}

#[test]
fn a_failed_trial_is_retried_from_its_checkpoint_until_max_failures() {
    let mut c = controller(1.0, None, Some(1));
    c.add_trial(cpus(1.0), false).unwrap();
    assert_eq!(c.schedule(), [Action::Start { trial: 0, restore: false }]);
    c.on_checkpoint(0).unwrap();
    assert_eq!(c.on_failed(0).unwrap(), TrialStatus::Pending);
    assert_eq!(c.schedule(), [Action::Start { trial: 0, restore: true }]);
    assert_eq!(c.on_failed(0).unwrap(), TrialStatus::Error);
    assert_eq!(c.failures(0).unwrap(), 2);
    assert!(c.all_finished());
    assert_eq!(c.in_use(), &cpus(0.0));
}

#[test]
fn unlimited_retries_and_stop_all() {
    let mut c = controller(1.0, None, None);
    c.add_trial(cpus(1.0), false).unwrap();
    c.add_trial(cpus(1.0), false).unwrap();
    c.schedule();
    for _ in 0..10 {
        assert_eq!(c.on_failed(0).unwrap(), TrialStatus::Pending);
        assert_eq!(started(&c.schedule()), [0]);
    }
    assert_eq!(c.stop_all(), [0]);
    assert_eq!(c.status(1).unwrap(), TrialStatus::Terminated, "a pending trial never starts");
    assert!(c.all_finished());
}

#[test]
fn bad_input_is_refused_by_name() {
    let mut c = controller(2.0, None, Some(0));
    let error = c.add_trial(cpus(4.0), false).unwrap_err();
    assert_eq!(
        error.to_string(),
        "trial 0 asks for {CPU: 4} but trials can use at most {CPU: 2} on this cluster; ask for less \
         (tune.with_resources) or add nodes"
    );
    assert!(matches!(c.add_trial(cpus(-1.0), false), Err(TuneError::BadAmount { .. })));
    assert!(matches!(c.on_ended(7), Err(TuneError::UnknownTrial(7))));
    c.add_trial(cpus(1.0), false).unwrap();
    assert!(matches!(c.on_result(0, 1.0, None), Err(TuneError::NotRunning { .. })));
    let zero =
        Config { capacity: cpus(1.0), max_concurrent: Some(0), max_failures: None, scheduler: SchedulerSpec::Fifo };
    assert!(Controller::new(zero).unwrap_err().to_string().contains("max_concurrent_trials is 0"));
    let asha = AshaSpec { max_t: 1.0, grace_period: 2.0, reduction_factor: 4.0, brackets: 1, stop_last_trials: true };
    let bad =
        Config { capacity: cpus(1.0), max_concurrent: None, max_failures: None, scheduler: SchedulerSpec::Asha(asha) };
    assert!(
        Controller::new(bad).unwrap_err().to_string().contains("max_t is 1; expected a number at least grace_period")
    );
}

#[test]
fn asha_decisions_reach_the_driver_through_on_result() {
    let asha = AshaSpec { max_t: 4.0, grace_period: 1.0, reduction_factor: 2.0, brackets: 1, stop_last_trials: true };
    let mut c = Controller::new(Config {
        capacity: cpus(2.0),
        max_concurrent: None,
        max_failures: Some(0),
        scheduler: SchedulerSpec::Asha(asha),
    })
    .unwrap();
    c.add_trial(cpus(1.0), false).unwrap();
    c.add_trial(cpus(1.0), false).unwrap();
    c.schedule();
    assert_eq!(c.on_result(0, 1.0, Some(5.0)).unwrap(), Decision::Continue);
    assert_eq!(c.on_result(1, 1.0, Some(1.0)).unwrap(), Decision::Stop);
    assert_eq!(c.on_result(0, 4.0, Some(6.0)).unwrap(), Decision::Stop, "max_t reached");
}

#[test]
fn a_train_runs_demand_replaces_the_default_and_is_learned_for_trials_to_come() {
    // Four trials on 2 CPUs, each starting a Train run of two 1-CPU workers.
    let mut c = controller(2.0, None, Some(0));
    for _ in 0..4 {
        c.add_trial(cpus(1.0), true).unwrap();
    }
    assert_eq!(started(&c.schedule()), [0, 1], "before any Train run, the default of 1 CPU each");
    assert_eq!(c.on_train_demand(0, cpus(2.0)).unwrap(), [], "trial 1 still counts its default CPU");
    assert_eq!(c.on_train_demand(1, cpus(2.0)).unwrap(), [0], "trial 0's run goes, trial 1's waits");
    assert_eq!(c.in_use(), &cpus(2.0), "a waiting run holds nothing");
    assert_eq!(c.schedule(), [], "the pending trials now count 2 CPUs each");
    c.on_ended(0).unwrap();
    assert_eq!(granted(&c.schedule()), [1], "trial 1's run goes before any new trial starts");
    c.on_ended(1).unwrap();
    assert_eq!(started(&c.schedule()), [2], "one at a time from now on");
    // A trial stopped while its run waits gives back nothing it did not hold.
    c.schedule();
    c.on_train_demand(2, cpus(2.0)).unwrap();
    c.on_ended(2).unwrap();
    assert_eq!(c.in_use(), &cpus(0.0));
    // A trial with resources of its own keeps them.
    let mut fixed = controller(2.0, None, Some(0));
    fixed.add_trial(cpus(1.0), false).unwrap();
    fixed.schedule();
    assert_eq!(fixed.on_train_demand(0, cpus(2.0)).unwrap(), [0]);
    assert_eq!(fixed.in_use(), &cpus(1.0));
}

#[test]
fn a_restored_experiment_keeps_finished_trials_and_resumes_the_rest_from_checkpoints() {
    let mut c = controller(2.0, None, Some(0));
    c.add_restored_trial(cpus(1.0), true, TrialStatus::Terminated, true, 0).unwrap();
    c.add_restored_trial(cpus(1.0), true, TrialStatus::Error, false, 1).unwrap();
    c.add_restored_trial(cpus(1.0), true, TrialStatus::Running, true, 0).unwrap();
    c.add_restored_trial(cpus(1.0), true, TrialStatus::Pending, false, 0).unwrap();
    assert_eq!(c.schedule(), [Action::Start { trial: 2, restore: true }, Action::Start { trial: 3, restore: false }]);
    assert_eq!(c.status(0).unwrap(), TrialStatus::Terminated);
    assert_eq!(c.status(1).unwrap(), TrialStatus::Error);
    assert_eq!(c.failures(1).unwrap(), 1);
}

fn with_scheduler(capacity: f64, scheduler: SchedulerSpec) -> Controller {
    Controller::new(Config { capacity: cpus(capacity), max_concurrent: None, max_failures: Some(0), scheduler })
        .unwrap()
}

#[test]
fn hyperband_pauses_trials_beyond_the_free_slots_then_resumes_the_best_and_stops_the_rest() {
    // max_t 3, eta 3: s_max_1 = 2; the first bracket (s=0) takes 2 trials to 3, the second (s=1)
    // takes ceil(2/2 * 3) = 3 trials to a milestone of 1, then the best one runs to 3.
    let spec = crate::HyperBandSpec { max_t: 3.0, reduction_factor: 3.0, stop_last_trials: true };
    let mut c = with_scheduler(1.0, SchedulerSpec::HyperBand(spec));
    for _ in 0..5 {
        c.add_trial(cpus(1.0), false).unwrap();
    }
    // A bracket waits for all its trials at a milestone, its last one too.
    for (trial, at_three) in [(0, Decision::Pause), (1, Decision::Stop)] {
        assert_eq!(started(&c.schedule()), [trial]);
        for time in 1..3 {
            assert_eq!(c.on_result(trial, time as f64, Some(0.0)).unwrap(), Decision::Continue);
        }
        assert_eq!(c.on_result(trial, 3.0, Some(0.0)).unwrap(), at_three, "trial {trial} at the milestone");
    }
    c.on_ended(1).unwrap();
    assert_eq!(c.take_changes(), [(0, TrialStatus::Terminated)], "the last milestone ends the paused one too");
    // One CPU for the three trials of the second bracket: each pauses at 1, freeing it.
    for (trial, reward) in [(2, 0.5), (3, 0.9)] {
        assert_eq!(started(&c.schedule()), [trial]);
        assert_eq!(c.on_result(trial, 1.0, Some(reward)).unwrap(), Decision::Pause);
        assert_eq!(c.status(trial).unwrap(), TrialStatus::Paused);
        assert_eq!(c.in_use().get("CPU").copied().unwrap_or(0.0), 0.0, "a paused trial holds nothing");
    }
    assert_eq!(started(&c.schedule()), [4]);
    // The last to reach the milestone completes the stage: trial 3 is the best and goes on.
    assert_eq!(c.on_result(4, 1.0, Some(0.1)).unwrap(), Decision::Stop);
    c.on_ended(4).unwrap();
    assert_eq!(c.take_changes(), [(2, TrialStatus::Terminated)], "the paused worse one is stopped");
    assert_eq!(c.schedule(), [Action::Start { trial: 3, restore: false }], "the best resumes");
    assert_eq!(c.on_result(3, 2.0, Some(1.0)).unwrap(), Decision::Continue);
    assert_eq!(c.on_result(3, 3.0, Some(1.0)).unwrap(), Decision::Stop);
    c.on_ended(3).unwrap();
    assert!(c.all_finished() && c.take_changes().is_empty());
}

#[test]
fn pbt_pauses_at_its_interval_while_others_wait_and_resumes_the_least_progressed_first() {
    let spec = crate::PbtSpec { perturbation_interval: 2.0, burn_in_period: 0.0, quantile_fraction: 0.25 };
    let mut c = with_scheduler(1.0, SchedulerSpec::Pbt(spec));
    for _ in 0..2 {
        c.add_trial(cpus(1.0), false).unwrap();
    }
    assert_eq!(started(&c.schedule()), [0]);
    assert_eq!(c.on_result(0, 1.0, Some(1.0)).unwrap(), Decision::Continue, "within its interval");
    c.on_checkpoint(0).unwrap();
    assert_eq!(c.on_result(0, 2.0, Some(1.0)).unwrap(), Decision::Pause, "trial 1 waits for the CPU");
    assert_eq!(c.schedule(), [Action::Start { trial: 1, restore: false }]);
    assert_eq!(c.on_result(1, 1.0, Some(5.0)).unwrap(), Decision::Continue);
    assert_eq!(c.on_result(1, 2.0, Some(5.0)).unwrap(), Decision::Pause, "trial 0 waits now");
    // Both at time 2: the older goes first, from its checkpoint.
    assert_eq!(c.schedule(), [Action::Start { trial: 0, restore: true }]);
    assert_eq!(c.status(1).unwrap(), TrialStatus::Paused);
    c.on_ended(0).unwrap();
    assert_eq!(started(&c.schedule()), [1]);
    assert_eq!(c.on_result(1, 4.0, Some(5.0)).unwrap(), Decision::Continue, "no one waits: it goes on");
}

#[test]
fn under_a_drivers_scheduler_only_the_trials_it_chooses_start_and_pauses_wait_for_it() {
    let mut c = Controller::new(Config {
        capacity: cpus(2.0),
        max_concurrent: None,
        max_failures: Some(0),
        scheduler: SchedulerSpec::Driver,
    })
    .unwrap();
    for _ in 0..3 {
        c.add_trial(cpus(1.0), false).unwrap();
    }
    assert_eq!(c.schedule(), [], "the driver chooses");
    assert_eq!(c.start_chosen(2).unwrap(), Some(Action::Start { trial: 2, restore: false }));
    assert_eq!(c.on_result(2, 1.0, Some(1.0)).unwrap(), Decision::Continue, "the driver decides");
    assert_eq!(c.start_chosen(0).unwrap(), Some(Action::Start { trial: 0, restore: false }));
    assert!(!c.has_room_for(1).unwrap());
    assert_eq!(c.start_chosen(1).unwrap(), None, "no room for a third");
    assert!(matches!(c.start_chosen(0), Err(TuneError::NotStartable { trial: 0, .. })));

    c.on_checkpoint(2).unwrap();
    c.pause(2).unwrap();
    assert_eq!(c.status(2).unwrap(), TrialStatus::Paused);
    assert_eq!(c.in_use(), &cpus(1.0));
    assert_eq!(c.schedule(), [], "a paused trial waits to be chosen");
    c.on_ended(1).unwrap();
    assert_eq!(c.status(1).unwrap(), TrialStatus::Terminated, "a pending trial the scheduler stopped");
    assert_eq!(c.start_chosen(2).unwrap(), Some(Action::Start { trial: 2, restore: true }));
    c.on_ended(0).unwrap();
    c.on_ended(2).unwrap();
    assert!(c.all_finished());
}
