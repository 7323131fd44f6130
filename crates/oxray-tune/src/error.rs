//! What the controller refuses, each naming the value and what was expected.

use crate::resources::Resources;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TuneError {
    #[error(
        "trial {trial} asks for {} but trials can use at most {} on this cluster; ask for less \
         (tune.with_resources) or add nodes",
        crate::resources::show(.asks),
        crate::resources::show(.capacity)
    )]
    NeverFits { trial: u32, asks: Resources, capacity: Resources },
    #[error("resource {name:?} is {value}; expected a finite amount of 0 or more")]
    BadAmount { name: String, value: f64 },
    #[error("{what} is {value}; expected {expected}")]
    BadSetting { what: &'static str, value: String, expected: &'static str },
    #[error("trial {0} is not known to this experiment")]
    UnknownTrial(u32),
    #[error("trial {trial} is {status:?}; {event} expects a RUNNING trial")]
    NotRunning { trial: u32, status: crate::TrialStatus, event: &'static str },
    #[error("trial {trial} is {status:?}; only a PENDING or PAUSED trial can be started (choose_trial_to_run)")]
    NotStartable { trial: u32, status: crate::TrialStatus },
}

impl TuneError {
    /// `BadSetting` for a numeric setting `what` whose `value` is not `expected`.
    pub(crate) fn bad_setting<T>(what: &'static str, value: f64, expected: &'static str) -> Result<T, TuneError> {
        Err(TuneError::BadSetting { what, value: value.to_string(), expected })
    }
}
