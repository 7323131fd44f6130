//! Ray Serve's default autoscaling policy: the running and queued requests that
//! handles and replicas report ([`RequestMetrics`], step functions summed and
//! reduced over the look-back window), the count they call for, and the delays
//! before the target moves ([`Autoscaler`]).

use crate::config::{Aggregation, AutoscalingConfig};
use std::collections::{BTreeMap, VecDeque};

/// Each source's reported request counts (a handle's queued and running requests,
/// or a replica's), as (time, value) samples; a value holds until the next.
#[derive(Clone, Debug, Default)]
pub struct RequestMetrics {
    series: BTreeMap<String, VecDeque<(u64, f64)>>,
}

impl RequestMetrics {
    /// Records `value` from `source` at `now_ms`, dropping what fell out of `window_ms`
    /// (the last sample before the window stays: it is the value at the window's start).
    pub fn record(&mut self, source: &str, now_ms: u64, value: f64, window_ms: u64) {
        let samples = self.series.entry(source.to_string()).or_default();
        samples.push_back((now_ms, value.max(0.0)));
        let start = now_ms.saturating_sub(window_ms);
        while samples.len() > 1 && samples[1].0 <= start {
            samples.pop_front();
        }
    }

    /// A source gone (a replica stopped, a handle closed): its requests no longer count.
    pub fn forget(&mut self, source: &str) {
        self.series.remove(source);
    }

    /// All sources' requests summed over `[now - window, now]`, reduced by `how` (a mean
    /// weighs each value by how long it held); `None` when nothing was reported.
    pub fn total(&self, now_ms: u64, window_ms: u64, how: Aggregation) -> Option<f64> {
        let start = now_ms.saturating_sub(window_ms);
        // The times at which the sum can change, within the window.
        let mut points: Vec<u64> = self
            .series
            .values()
            .flat_map(|samples| samples.iter().map(|(t, _)| (*t).max(start)))
            .filter(|t| *t <= now_ms)
            .collect();
        if points.is_empty() {
            return None;
        }
        points.sort_unstable();
        points.dedup();
        let sum_at = |t: u64| -> f64 {
            self.series
                .values()
                .filter_map(|samples| samples.iter().rev().find(|(at, _)| *at <= t).map(|(_, v)| *v))
                .sum()
        };
        let segments: Vec<(f64, u64)> = points
            .iter()
            .enumerate()
            .map(|(i, t)| (sum_at(*t), points.get(i + 1).copied().unwrap_or(now_ms) - t))
            .collect();
        Some(match how {
            Aggregation::Max => segments.iter().map(|(v, _)| *v).fold(f64::MIN, f64::max),
            Aggregation::Min => segments.iter().map(|(v, _)| *v).fold(f64::MAX, f64::min),
            Aggregation::Mean => {
                let span: u64 = segments.iter().map(|(_, d)| d).sum();
                if span == 0 {
                    segments.last().map(|(v, _)| *v).unwrap_or(0.0)
                } else {
                    segments.iter().map(|(v, d)| v * *d as f64).sum::<f64>() / span as f64
                }
            }
        })
    }
}

/// The count `total` requests call for with `running` replicas, before delays and bounds:
/// `total / target_ongoing_requests`, approached by the scaling factor and rounded up (a
/// downscale that rounding would leave where it is takes one step).
pub fn desired_replicas(config: &AutoscalingConfig, running: u32, total: f64) -> u32 {
    let n = f64::from(running);
    let desired = total / config.target_ongoing_requests;
    if desired > n {
        (n + config.upscaling_factor * (desired - n)).ceil() as u32
    } else if desired < n {
        let next = (n + config.downscaling_factor * (desired - n)).ceil() as u32;
        if next >= running { running - 1 } else { next }
    } else {
        running
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// The policy's memory: which way it has wanted to move the target, and since when.
#[derive(Clone, Debug, Default)]
pub struct Autoscaler {
    wanting: Option<(Direction, u64)>,
}

impl Autoscaler {
    /// The deployment's next target, from its current `target`, its `running` replicas and
    /// the requests reported (`total`, None if none). The target moves only once the policy
    /// has wanted the same direction for the delay without interruption; a first request
    /// with no replica running scales up at once (cold start).
    pub fn next_target(
        &mut self,
        config: &AutoscalingConfig,
        target: u32,
        running: u32,
        total: Option<f64>,
        now_ms: u64,
    ) -> u32 {
        let bound = |n: u32| n.clamp(config.min_replicas, config.max_replicas);
        let total = total.unwrap_or(0.0);
        if running == 0 {
            self.wanting = None;
            if total > 0.0 {
                return bound(target.max(config.upscaling_factor.ceil() as u32));
            }
            return bound(target);
        }
        let mut desired = bound(desired_replicas(config, running, total));
        let direction = match desired.cmp(&target) {
            std::cmp::Ordering::Greater => Direction::Up,
            std::cmp::Ordering::Less => Direction::Down,
            std::cmp::Ordering::Equal => {
                self.wanting = None;
                return target;
            }
        };
        let delay = match direction {
            Direction::Up => config.upscale_delay_ms,
            Direction::Down if desired == 0 && target == 1 => {
                config.downscale_to_zero_delay_ms.unwrap_or(config.downscale_delay_ms)
            }
            Direction::Down => {
                // Only the last step goes to zero, with its own delay.
                desired = desired.max(1);
                config.downscale_delay_ms
            }
        };
        let since = match self.wanting {
            Some((wanted, since)) if wanted == direction => since,
            _ => {
                self.wanting = Some((direction, now_ms));
                now_ms
            }
        };
        if now_ms.saturating_sub(since) >= delay {
            self.wanting = None;
            return desired;
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use super::{Autoscaler, RequestMetrics, desired_replicas};
    use crate::config::{Aggregation, AutoscalingConfig};

    #[test]
    fn the_window_sums_the_sources_and_weighs_each_value_by_how_long_it_held() {
        let mut metrics = RequestMetrics::default();
        let window = 10_000;
        metrics.record("handle-a", 0, 4.0, window);
        metrics.record("handle-b", 5_000, 2.0, window);
        // 0..5 s: 4; 5..10 s: 6.
        assert_eq!(metrics.total(10_000, window, Aggregation::Mean), Some(5.0));
        assert_eq!(metrics.total(10_000, window, Aggregation::Max), Some(6.0));
        assert_eq!(metrics.total(10_000, window, Aggregation::Min), Some(4.0));
        // Later, a's 4 still holds from the window's start; b reports 0.
        metrics.record("handle-b", 15_000, 0.0, window);
        assert_eq!(metrics.total(20_000, window, Aggregation::Mean), Some(5.0));
        metrics.forget("handle-a");
        assert_eq!(metrics.total(20_000, window, Aggregation::Mean), Some(1.0));
        assert_eq!(RequestMetrics::default().total(0, window, Aggregation::Mean), None);
    }

    #[test]
    fn the_desired_count_is_the_requests_over_the_target_per_replica() {
        let config = AutoscalingConfig::auto();
        assert_eq!(desired_replicas(&config, 2, 10.0), 5);
        assert_eq!(desired_replicas(&config, 5, 2.0), 1);
        let halfway = AutoscalingConfig { upscaling_factor: 0.5, downscaling_factor: 0.5, ..AutoscalingConfig::auto() };
        assert_eq!(desired_replicas(&halfway, 2, 10.0), 4, "ceil(2 + 0.5 * 3)");
        // A downscale rounding would leave at 3 still takes a step.
        assert_eq!(desired_replicas(&halfway, 3, 5.0), 2, "ceil(3 + 0.5 * -0.5) is 3: one step down");
    }

    #[test]
    fn the_target_moves_only_after_the_delay_and_a_change_of_mind_restarts_it() {
        let config =
            AutoscalingConfig { upscale_delay_ms: 1_000, downscale_delay_ms: 5_000, ..AutoscalingConfig::auto() };
        let mut policy = Autoscaler::default();
        assert_eq!(policy.next_target(&config, 1, 1, Some(8.0), 0), 1);
        assert_eq!(policy.next_target(&config, 1, 1, Some(8.0), 999), 1);
        // The load dips for a moment: the wait starts again.
        assert_eq!(policy.next_target(&config, 1, 1, Some(2.0), 1_000), 1);
        assert_eq!(policy.next_target(&config, 1, 1, Some(8.0), 1_500), 1);
        assert_eq!(policy.next_target(&config, 1, 1, Some(8.0), 2_499), 1);
        assert_eq!(policy.next_target(&config, 1, 1, Some(8.0), 2_500), 4);
        // Down needs its own, longer delay.
        assert_eq!(policy.next_target(&config, 4, 4, Some(0.5), 3_000), 4);
        assert_eq!(policy.next_target(&config, 4, 4, Some(0.5), 8_000), 1);
    }

    #[test]
    fn bounds_cold_start_and_the_last_step_to_zero() {
        let config = AutoscalingConfig {
            min_replicas: 0,
            max_replicas: 3,
            upscale_delay_ms: 1_000,
            downscale_delay_ms: 1_000,
            downscale_to_zero_delay_ms: Some(9_000),
            ..AutoscalingConfig::default()
        };
        let mut policy = Autoscaler::default();
        // Clamped to max_replicas.
        policy.next_target(&config, 1, 1, Some(100.0), 0);
        assert_eq!(policy.next_target(&config, 1, 1, Some(100.0), 1_000), 3);
        // No load: down to 1 first (any other downscale is floored at 1), then to 0 after its own delay.
        policy.next_target(&config, 3, 3, Some(0.0), 2_000);
        assert_eq!(policy.next_target(&config, 3, 3, Some(0.0), 3_000), 1);
        policy.next_target(&config, 1, 1, Some(0.0), 3_000);
        assert_eq!(policy.next_target(&config, 1, 1, Some(0.0), 11_999), 1);
        assert_eq!(policy.next_target(&config, 1, 1, Some(0.0), 12_000), 0);
        // A request with nothing running: up at once.
        assert_eq!(policy.next_target(&config, 0, 0, Some(1.0), 12_001), 1);
        assert_eq!(policy.next_target(&config, 0, 0, None, 12_002), 0);
    }
}
