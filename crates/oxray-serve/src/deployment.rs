//! One deployment's replicas: starting them up to the target, rolling a new code
//! version in (new replicas serve before old ones stop), reconfiguring running
//! ones in place, health checks, replacing crashed and unhealthy replicas, failing
//! the deployment when its constructor keeps failing, stopping gracefully and then
//! killing, and its status as Ray reports it.

use crate::autoscaling::{Autoscaler, RequestMetrics};
use crate::config::{DeploymentSpec, Replicas};
use crate::status::{DeploymentStatus, DeploymentStatusTrigger, ReplicaState};
use std::collections::BTreeMap;

/// Consecutive failed health checks that make a replica unhealthy (Ray's threshold).
const UNHEALTHY_AFTER_FAILED_CHECKS: u32 = 3;
/// Constructor failures allowed per replica of the target before the deployment fails.
const CONSTRUCTOR_FAILURES_PER_REPLICA: u32 = 3;

/// What a deployment asks the runtime to do with one of its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaAction {
    Start { replica: String, code_version: String, config_version: String },
    Reconfigure { replica: String, config_version: String },
    CheckHealth { replica: String },
    Stop { replica: String, graceful_timeout_ms: u64 },
    Kill { replica: String },
}

#[derive(Clone, Debug)]
struct Replica {
    code_version: String,
    config_version: String,
    state: ReplicaState,
    /// Consecutive failed health checks.
    failed_checks: u32,
    /// When the health check in flight started.
    check_started_ms: Option<u64>,
    next_check_ms: u64,
    checks: u64,
    /// Draws its health checks' jitter (from the deployment's name and the replica's id).
    jitter_seed: u64,
    /// When a stopping replica is killed if it has not stopped.
    kill_at_ms: Option<u64>,
}

impl Replica {
    /// The next health check, a jittered period after `from_ms`.
    fn schedule_check(&mut self, from_ms: u64, period_ms: u64) {
        self.next_check_ms = from_ms + jittered(period_ms, self.jitter_seed, self.checks);
    }
}

/// Why the deployment is not where its target says (its status's cause).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// A deploy: new code or config, or a new count from the user.
    Config { scale: Option<bool> },
    /// The autoscaler moved the target (up: true).
    Autoscale { up: bool },
}

pub(crate) struct Deployment {
    spec: DeploymentSpec,
    target: u32,
    replicas: BTreeMap<String, Replica>,
    next_replica: u64,
    name_seed: u64,
    status: DeploymentStatus,
    trigger: DeploymentStatusTrigger,
    message: String,
    change: Option<Change>,
    constructor_failures: u32,
    /// A replica of the current code version has started (then failures are retried for ever).
    version_started: bool,
    unhealthy: bool,
    deleting: bool,
    autoscaler: Autoscaler,
    metrics: RequestMetrics,
}

impl Deployment {
    pub(crate) fn new(name: &str, spec: DeploymentSpec) -> Self {
        let target = match &spec.replicas {
            Replicas::Fixed(n) => *n,
            Replicas::Auto(config) => config.initial(),
        };
        Deployment {
            spec,
            target,
            replicas: BTreeMap::new(),
            next_replica: 0,
            name_seed: fnv1a(name.as_bytes()),
            status: DeploymentStatus::Updating,
            trigger: DeploymentStatusTrigger::ConfigUpdateStarted,
            message: String::new(),
            change: Some(Change::Config { scale: None }),
            constructor_failures: 0,
            version_started: false,
            unhealthy: false,
            deleting: false,
            autoscaler: Autoscaler::default(),
            metrics: RequestMetrics::default(),
        }
    }

    /// A redeploy: a new code version rolls, a new config version reconfigures in place, a new
    /// count (from the user) scales.
    pub(crate) fn update(&mut self, spec: DeploymentSpec) {
        let new_code = spec.code_version != self.spec.code_version;
        let new_config = spec.config_version != self.spec.config_version;
        let target = match (&spec.replicas, &self.spec.replicas) {
            (Replicas::Fixed(n), _) => *n,
            // An autoscaled deployment keeps its target across a redeploy, within the new bounds.
            (Replicas::Auto(config), Replicas::Auto(_)) => self.target.clamp(config.min_replicas, config.max_replicas),
            (Replicas::Auto(config), Replicas::Fixed(_)) => config.initial(),
        };
        if new_code {
            self.constructor_failures = 0;
            self.version_started = false;
        }
        let scale = (target != self.target).then_some(target > self.target);
        self.spec = spec;
        self.target = target;
        self.deleting = false;
        self.unhealthy = false;
        if new_code || new_config || self.status != DeploymentStatus::Healthy {
            self.set(DeploymentStatus::Updating, DeploymentStatusTrigger::ConfigUpdateStarted, "");
            self.change = Some(Change::Config { scale: None });
        } else if let Some(up) = scale {
            let status = if up { DeploymentStatus::Upscaling } else { DeploymentStatus::Downscaling };
            self.set(status, DeploymentStatusTrigger::ConfigUpdateStarted, "");
            self.change = Some(Change::Config { scale: Some(up) });
        }
    }

    pub(crate) fn delete(&mut self) {
        self.deleting = true;
        self.set(DeploymentStatus::Updating, DeploymentStatusTrigger::Deleting, "");
    }

    /// Deleted, and every replica gone.
    pub(crate) fn is_gone(&self) -> bool {
        self.deleting && self.replicas.is_empty()
    }

    pub(crate) fn status(&self) -> (DeploymentStatus, DeploymentStatusTrigger, &str) {
        (self.status, self.trigger, &self.message)
    }

    pub(crate) fn target(&self) -> u32 {
        self.target
    }

    pub(crate) fn replica_states(&self) -> BTreeMap<ReplicaState, u32> {
        let mut counts = BTreeMap::new();
        for replica in self.replicas.values() {
            *counts.entry(replica.state).or_insert(0) += 1;
        }
        counts
    }

    /// The replicas requests may go to.
    pub(crate) fn serving(&self) -> Vec<String> {
        self.replicas
            .iter()
            .filter(|(_, r)| matches!(r.state, ReplicaState::Running | ReplicaState::Updating))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A replica that outlived its controller (found running after a head restart): it serves at
    /// once, and its health is checked now.
    pub(crate) fn adopt(&mut self, replica: &str, code_version: &str, config_version: &str, now_ms: u64) {
        if code_version == self.spec.code_version {
            self.version_started = true;
        }
        let replica_state = Replica {
            code_version: code_version.to_string(),
            config_version: config_version.to_string(),
            state: ReplicaState::Running,
            failed_checks: 0,
            check_started_ms: None,
            next_check_ms: now_ms,
            checks: 0,
            jitter_seed: self.name_seed ^ fnv1a(replica.as_bytes()),
            kill_at_ms: None,
        };
        self.replicas.insert(replica.to_string(), replica_state);
    }

    // Events from the runtime. One about a replica the deployment no longer has is stale: ignored.

    /// Its constructor (and first `reconfigure`) returned.
    pub(crate) fn replica_started(&mut self, replica: &str, now_ms: u64) {
        let period = self.spec.health_check_period_ms;
        let Some(r) = self.replicas.get_mut(replica) else { return };
        if r.state != ReplicaState::Starting {
            return;
        }
        r.state = ReplicaState::Running;
        r.schedule_check(now_ms, period);
        if r.code_version == self.spec.code_version {
            self.version_started = true;
        }
    }

    pub(crate) fn replica_reconfigured(&mut self, replica: &str) {
        if let Some(r) = self.replicas.get_mut(replica)
            && r.state == ReplicaState::Updating
        {
            r.state = ReplicaState::Running;
        }
    }

    /// Its constructor raised (`error`: the traceback).
    pub(crate) fn replica_start_failed(&mut self, replica: &str, error: &str) {
        let Some(r) = self.replicas.remove(replica) else { return };
        self.metrics.forget(replica);
        if r.code_version == self.spec.code_version {
            self.constructor_failures += 1;
            self.message = format!("A replica failed to start: {error}");
        }
    }

    /// Its process ended (a crash, or killed): replaced at once.
    pub(crate) fn replica_died(&mut self, replica: &str, reason: &str) {
        let Some(r) = self.replicas.remove(replica) else { return };
        self.metrics.forget(replica);
        // One of an older version, being replaced anyway, says nothing of the deployment's health.
        if r.state != ReplicaState::Stopping && !self.deleting && r.code_version == self.spec.code_version {
            self.mark_unhealthy(&format!("Replica {replica} died: {reason}"));
        }
    }

    /// It stopped after `Stop` (or was killed).
    pub(crate) fn replica_stopped(&mut self, replica: &str) {
        if self.replicas.remove(replica).is_some() {
            self.metrics.forget(replica);
        }
    }

    pub(crate) fn health_checked(&mut self, replica: &str, healthy: bool, error: &str) {
        let period = self.spec.health_check_period_ms;
        let Some(r) = self.replicas.get_mut(replica) else { return };
        // A result for a check already counted as timed out is late: ignored.
        let Some(started) = r.check_started_ms.take() else { return };
        r.checks += 1;
        r.schedule_check(started, period);
        if healthy {
            r.failed_checks = 0;
        } else {
            r.failed_checks += 1;
            if r.failed_checks >= UNHEALTHY_AFTER_FAILED_CHECKS {
                self.message =
                    format!("Replica {replica} failed {UNHEALTHY_AFTER_FAILED_CHECKS} health checks: {error}");
            }
        }
    }

    /// What a handle or replica reported: its running plus queued requests.
    pub(crate) fn record_requests(&mut self, source: &str, value: f64, now_ms: u64) {
        if let Replicas::Auto(config) = &self.spec.replicas {
            self.metrics.record(source, now_ms, value, config.look_back_period_ms);
        }
    }

    /// Brings the replicas toward the target; the actions to carry out go to `actions`.
    pub(crate) fn reconcile(&mut self, now_ms: u64, actions: &mut Vec<ReplicaAction>) {
        self.kill_overdue(now_ms, actions);
        if self.deleting {
            let live: Vec<String> = self
                .replicas
                .iter()
                .filter(|(_, r)| r.state != ReplicaState::Stopping)
                .map(|(id, _)| id.clone())
                .collect();
            for id in live {
                self.stop(&id, now_ms, actions);
            }
            return;
        }
        self.check_health(now_ms, actions);
        self.autoscale(now_ms);
        self.reconfigure(actions);
        self.roll(now_ms, actions);
        self.update_status();
    }

    fn kill_overdue(&mut self, now_ms: u64, actions: &mut Vec<ReplicaAction>) {
        for (id, r) in &mut self.replicas {
            if r.kill_at_ms.is_some_and(|at| now_ms >= at) {
                r.kill_at_ms = None;
                actions.push(ReplicaAction::Kill { replica: id.clone() });
            }
        }
    }

    fn check_health(&mut self, now_ms: u64, actions: &mut Vec<ReplicaAction>) {
        let (period, timeout) = (self.spec.health_check_period_ms, self.spec.health_check_timeout_ms);
        let mut unhealthy = Vec::new();
        for (id, r) in &mut self.replicas {
            if !matches!(r.state, ReplicaState::Running | ReplicaState::Updating) {
                continue;
            }
            match r.check_started_ms {
                Some(started) if now_ms.saturating_sub(started) >= timeout => {
                    r.check_started_ms = None;
                    r.checks += 1;
                    r.schedule_check(started, period);
                    r.failed_checks += 1;
                    if r.failed_checks >= UNHEALTHY_AFTER_FAILED_CHECKS {
                        self.message = format!("Replica {id}'s health check timed out after {timeout} ms");
                    }
                }
                None if now_ms >= r.next_check_ms => {
                    r.check_started_ms = Some(now_ms);
                    actions.push(ReplicaAction::CheckHealth { replica: id.clone() });
                }
                _ => {}
            }
            if r.failed_checks >= UNHEALTHY_AFTER_FAILED_CHECKS {
                unhealthy.push((id.clone(), r.code_version == self.spec.code_version));
            }
        }
        for (id, current) in unhealthy {
            let message = std::mem::take(&mut self.message);
            if current {
                self.mark_unhealthy(&message);
            }
            self.stop(&id, now_ms, actions);
        }
    }

    fn mark_unhealthy(&mut self, message: &str) {
        self.unhealthy = true;
        let during_update = matches!(self.change, Some(Change::Config { .. })) && !self.version_started;
        let status = if during_update { DeploymentStatus::DeployFailed } else { DeploymentStatus::Unhealthy };
        self.set(status, DeploymentStatusTrigger::HealthCheckFailed, message);
    }

    fn autoscale(&mut self, now_ms: u64) {
        let Replicas::Auto(config) = &self.spec.replicas else { return };
        let running = self.replicas.values().filter(|r| r.state == ReplicaState::Running).count() as u32;
        let total = self.metrics.total(now_ms, config.look_back_period_ms, config.aggregation);
        let next = self.autoscaler.next_target(config, self.target, running, total, now_ms);
        if next != self.target {
            let up = next > self.target;
            self.target = next;
            if self.change.is_none() && self.status == DeploymentStatus::Healthy {
                let status = if up { DeploymentStatus::Upscaling } else { DeploymentStatus::Downscaling };
                self.set(status, DeploymentStatusTrigger::Autoscaling, "");
                self.change = Some(Change::Autoscale { up });
            }
        }
    }

    fn reconfigure(&mut self, actions: &mut Vec<ReplicaAction>) {
        for (id, r) in &mut self.replicas {
            if r.state == ReplicaState::Running
                && r.code_version == self.spec.code_version
                && r.config_version != self.spec.config_version
            {
                r.state = ReplicaState::Updating;
                r.config_version = self.spec.config_version.clone();
                actions
                    .push(ReplicaAction::Reconfigure { replica: id.clone(), config_version: r.config_version.clone() });
            }
        }
    }

    fn failed_to_start(&self) -> bool {
        let allowed = self.spec.max_constructor_retry_count.min(CONSTRUCTOR_FAILURES_PER_REPLICA * self.target.max(1));
        !self.version_started && self.constructor_failures >= allowed
    }

    /// Starts, and stops, toward `target` replicas of the current version: during a rolling
    /// update at most `surge` above it, an old replica stopping only once a new one serves in
    /// its place.
    fn roll(&mut self, now_ms: u64, actions: &mut Vec<ReplicaAction>) {
        let version = self.spec.code_version.clone();
        let is_current = |r: &Replica| r.code_version == version;
        let serving = |r: &Replica| matches!(r.state, ReplicaState::Running | ReplicaState::Updating);
        let ids = |pick: &dyn Fn(&Replica) -> bool| -> Vec<String> {
            self.replicas
                .iter()
                .filter(|(_, r)| r.state != ReplicaState::Stopping && pick(r))
                .map(|(id, _)| id.clone())
                .collect()
        };
        let current_starting = ids(&|r| is_current(r) && r.state == ReplicaState::Starting);
        let current_serving = ids(&|r| is_current(r) && serving(r));
        let old_starting = ids(&|r| !is_current(r) && r.state == ReplicaState::Starting);
        let old_serving = ids(&|r| !is_current(r) && serving(r));
        let target = self.target as usize;

        // Old replicas that do not serve yet go at once; serving ones as new ones serve in their place.
        for id in &old_starting {
            self.stop(id, now_ms, actions);
        }
        let excess = (current_serving.len() + old_serving.len()).saturating_sub(target).min(old_serving.len());
        for id in &old_serving[..excess] {
            self.stop(id, now_ms, actions);
        }
        let old_left = old_serving.len() - excess;
        let current = current_starting.len() + current_serving.len();
        if current < target && !self.failed_to_start() {
            let allowed = if old_left == 0 { target } else { target + self.spec.surge(self.target) as usize };
            for _ in 0..(target - current).min(allowed.saturating_sub(current + old_left)) {
                self.start(actions);
            }
        }
        // Too many of the current version: those not serving yet go first, then the newest.
        if old_left == 0 && current > target {
            let extra: Vec<&String> =
                current_starting.iter().rev().chain(current_serving.iter().rev()).take(current - target).collect();
            for id in extra {
                self.stop(&id.clone(), now_ms, actions);
            }
        }
    }

    fn start(&mut self, actions: &mut Vec<ReplicaAction>) {
        // Adopted replicas hold ids this controller never drew: skip those.
        let id = loop {
            let id = replica_id(self.name_seed, self.next_replica);
            self.next_replica += 1;
            if !self.replicas.contains_key(&id) {
                break id;
            }
        };
        let replica = Replica {
            code_version: self.spec.code_version.clone(),
            config_version: self.spec.config_version.clone(),
            state: ReplicaState::Starting,
            failed_checks: 0,
            check_started_ms: None,
            next_check_ms: u64::MAX,
            checks: 0,
            jitter_seed: self.name_seed ^ fnv1a(id.as_bytes()),
            kill_at_ms: None,
        };
        actions.push(ReplicaAction::Start {
            replica: id.clone(),
            code_version: replica.code_version.clone(),
            config_version: replica.config_version.clone(),
        });
        self.replicas.insert(id, replica);
    }

    fn stop(&mut self, id: &str, now_ms: u64, actions: &mut Vec<ReplicaAction>) {
        let graceful = self.spec.graceful_shutdown_timeout_ms;
        let Some(r) = self.replicas.get_mut(id) else { return };
        if r.state == ReplicaState::Stopping {
            return;
        }
        r.state = ReplicaState::Stopping;
        r.check_started_ms = None;
        r.kill_at_ms = Some(now_ms + graceful);
        self.metrics.forget(id);
        actions.push(ReplicaAction::Stop { replica: id.to_string(), graceful_timeout_ms: graceful });
    }

    /// At the target, every replica of the current version and config, running, none stopping
    /// (as Ray: a deployment is HEALTHY once its old replicas are gone).
    fn at_target(&self) -> bool {
        let running = self
            .replicas
            .values()
            .filter(|r| {
                r.state == ReplicaState::Running
                    && r.code_version == self.spec.code_version
                    && r.config_version == self.spec.config_version
            })
            .count();
        running == self.target as usize && self.replicas.len() == running
    }

    fn update_status(&mut self) {
        if self.failed_to_start() {
            let message = self.message.clone();
            self.set(DeploymentStatus::DeployFailed, DeploymentStatusTrigger::ReplicaStartupFailed, &message);
            return;
        }
        if !self.at_target() {
            return;
        }
        let trigger = match self.change.take() {
            Some(Change::Config { scale: Some(true) }) | Some(Change::Autoscale { up: true }) => {
                DeploymentStatusTrigger::UpscaleCompleted
            }
            Some(Change::Config { scale: Some(false) }) | Some(Change::Autoscale { up: false }) => {
                DeploymentStatusTrigger::DownscaleCompleted
            }
            Some(Change::Config { scale: None }) => DeploymentStatusTrigger::ConfigUpdateCompleted,
            None if self.unhealthy => DeploymentStatusTrigger::Unspecified,
            None => return,
        };
        self.unhealthy = false;
        self.set(DeploymentStatus::Healthy, trigger, "");
    }

    fn set(&mut self, status: DeploymentStatus, trigger: DeploymentStatusTrigger, message: &str) {
        self.status = status;
        self.trigger = trigger;
        self.message = message.to_string();
    }
}

/// Ray's replica ids: 8 lowercase characters, here from the deployment's name and a counter
/// (the same on every run: the engine draws no randomness).
fn replica_id(seed: u64, n: u64) -> String {
    let mut x = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..8)
        .map(|_| {
            x = splitmix(x);
            char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x % 36) as usize])
        })
        .collect()
}

/// The health check period times U(0.9, 1.1), as Ray spreads checks, drawn from the replica
/// and the check's number.
fn jittered(period_ms: u64, seed: u64, check: u64) -> u64 {
    let unit = (splitmix(seed ^ check.wrapping_add(1)) % 10_001) as f64 / 10_000.0;
    (period_ms as f64 * (0.9 + 0.2 * unit)) as u64
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
