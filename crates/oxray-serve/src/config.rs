//! A deployment's settings the controller acts on, with Ray Serve 2.60's
//! defaults and checks (times in milliseconds). The Python API checks the
//! options users type; these checks guard the engine's own input.

use crate::error::ServeError;

/// How many replicas a deployment wants: a fixed count, or what the autoscaling policy decides.
#[derive(Clone, Debug, PartialEq)]
pub enum Replicas {
    Fixed(u32),
    Auto(AutoscalingConfig),
}

/// How the request counts in the look-back window are reduced to one (Ray's `aggregation_function`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregation {
    Mean,
    Max,
    Min,
}

/// Ray's `AutoscalingConfig` (the default policy's fields).
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscalingConfig {
    pub min_replicas: u32,
    /// The target at the first deploy; `None` for `min_replicas`.
    pub initial_replicas: Option<u32>,
    pub max_replicas: u32,
    /// Running plus queued requests per replica the policy aims for.
    pub target_ongoing_requests: f64,
    pub look_back_period_ms: u64,
    pub upscaling_factor: f64,
    pub downscaling_factor: f64,
    pub upscale_delay_ms: u64,
    pub downscale_delay_ms: u64,
    /// The delay of the last step, 1 to 0; `None` for `downscale_delay_ms`.
    pub downscale_to_zero_delay_ms: Option<u64>,
    pub aggregation: Aggregation,
}

impl Default for AutoscalingConfig {
    /// An explicit `AutoscalingConfig()`'s defaults (note `max_replicas` 1).
    fn default() -> Self {
        AutoscalingConfig {
            min_replicas: 1,
            initial_replicas: None,
            max_replicas: 1,
            target_ongoing_requests: 2.0,
            look_back_period_ms: 30_000,
            upscaling_factor: 1.0,
            downscaling_factor: 1.0,
            upscale_delay_ms: 30_000,
            downscale_delay_ms: 600_000,
            downscale_to_zero_delay_ms: None,
            aggregation: Aggregation::Mean,
        }
    }
}

impl AutoscalingConfig {
    /// `num_replicas="auto"`'s defaults: up to 100 replicas.
    pub fn auto() -> Self {
        AutoscalingConfig { max_replicas: 100, ..AutoscalingConfig::default() }
    }

    /// The target at the first deploy.
    pub fn initial(&self) -> u32 {
        self.initial_replicas.unwrap_or(self.min_replicas)
    }

    pub fn check(&self) -> Result<(), ServeError> {
        if self.max_replicas < 1 {
            return Err(ServeError::invalid("max_replicas", self.max_replicas, "at least 1"));
        }
        if self.min_replicas > self.max_replicas {
            return Err(ServeError::invalid("min_replicas", self.min_replicas, "at most max_replicas"));
        }
        if let Some(initial) = self.initial_replicas
            && !(self.min_replicas..=self.max_replicas).contains(&initial)
        {
            return Err(ServeError::invalid("initial_replicas", initial, "between min_replicas and max_replicas"));
        }
        if !(self.target_ongoing_requests > 0.0 && self.target_ongoing_requests.is_finite()) {
            return Err(ServeError::invalid(
                "target_ongoing_requests",
                self.target_ongoing_requests,
                "a number above 0",
            ));
        }
        for (option, factor) in
            [("upscaling_factor", self.upscaling_factor), ("downscaling_factor", self.downscaling_factor)]
        {
            if !(factor > 0.0 && factor.is_finite()) {
                return Err(ServeError::invalid(option, factor, "a number above 0"));
            }
        }
        if self.look_back_period_ms == 0 {
            return Err(ServeError::invalid("look_back_period_s", 0, "above 0"));
        }
        Ok(())
    }
}

/// One deployment's settings, as the controller needs them.
#[derive(Clone, Debug, PartialEq)]
pub struct DeploymentSpec {
    /// The code's version: a change replaces the replicas by rolling update.
    pub code_version: String,
    /// The version of what running replicas take in place (`user_config` and the other
    /// `NeedsActorReconfigure` options): a change reconfigures them, without a restart.
    pub config_version: String,
    pub replicas: Replicas,
    /// The share of the target replaced at a time in a rolling update, in (0, 1].
    pub rolling_update_percentage: f64,
    /// Extra replicas a rolling update may run above the target, as a share of it (at least one:
    /// new replicas are ready before old ones stop).
    pub max_surge_percent: f64,
    pub health_check_period_ms: u64,
    pub health_check_timeout_ms: u64,
    pub graceful_shutdown_timeout_ms: u64,
    /// The deployment fails after `min(this, 3 × target)` constructor failures with no
    /// replica of its version started.
    pub max_constructor_retry_count: u32,
}

impl DeploymentSpec {
    /// Ray's defaults for the rest.
    pub fn new(code_version: &str, replicas: Replicas) -> Self {
        DeploymentSpec {
            code_version: code_version.to_string(),
            config_version: String::new(),
            replicas,
            rolling_update_percentage: 0.2,
            max_surge_percent: 0.0,
            health_check_period_ms: 10_000,
            health_check_timeout_ms: 30_000,
            graceful_shutdown_timeout_ms: 20_000,
            max_constructor_retry_count: 20,
        }
    }

    pub fn check(&self) -> Result<(), ServeError> {
        if let Replicas::Auto(config) = &self.replicas {
            config.check()?;
        }
        if !(self.rolling_update_percentage > 0.0 && self.rolling_update_percentage <= 1.0) {
            return Err(ServeError::invalid("rolling_update_percentage", self.rolling_update_percentage, "in (0, 1]"));
        }
        if !(self.max_surge_percent >= 0.0 && self.max_surge_percent.is_finite()) {
            return Err(ServeError::invalid("max_surge_percent", self.max_surge_percent, "0 or more"));
        }
        if self.health_check_period_ms == 0 {
            return Err(ServeError::invalid("health_check_period_s", 0, "above 0"));
        }
        if self.health_check_timeout_ms == 0 {
            return Err(ServeError::invalid("health_check_timeout_s", 0, "above 0"));
        }
        Ok(())
    }

    /// Replicas a rolling update replaces at once, and may run above the target meanwhile.
    pub(crate) fn surge(&self, target: u32) -> u32 {
        let share = |p: f64| (p * f64::from(target)).ceil() as u32;
        share(self.rolling_update_percentage).max(share(self.max_surge_percent)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::{AutoscalingConfig, DeploymentSpec, Replicas};
    use crate::ServeError;

    #[test]
    fn bad_values_are_named() {
        let config = AutoscalingConfig { min_replicas: 3, max_replicas: 2, ..AutoscalingConfig::default() };
        let Err(ServeError::InvalidOption { option, value, .. }) = config.check() else { panic!("accepted") };
        assert_eq!((option, value.as_str()), ("min_replicas", "3"));
        let config = AutoscalingConfig { initial_replicas: Some(5), ..AutoscalingConfig::auto() };
        assert!(config.check().is_ok());
        let config = AutoscalingConfig { initial_replicas: Some(500), ..AutoscalingConfig::auto() };
        assert!(config.check().unwrap_err().to_string().starts_with("initial_replicas=500"));
        let spec = DeploymentSpec { rolling_update_percentage: 0.0, ..DeploymentSpec::new("v1", Replicas::Fixed(1)) };
        assert!(spec.check().unwrap_err().to_string().contains("rolling_update_percentage=0.0: expected in (0, 1]"));
    }

    #[test]
    fn a_rolling_update_replaces_a_fifth_at_a_time_and_at_least_one() {
        let spec = DeploymentSpec::new("v1", Replicas::Fixed(10));
        assert_eq!(spec.surge(10), 2);
        assert_eq!(spec.surge(1), 1);
        let wide = DeploymentSpec { max_surge_percent: 0.5, ..spec };
        assert_eq!(wide.surge(10), 5);
    }
}
