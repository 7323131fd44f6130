//! Map operators: one task per read task or per bundle of input blocks, within
//! the budget and the operator's concurrency, on a class UDF's actor pool when it
//! has one (grown when every actor is busy, shrunk when little used).

use super::{Action, BundleId, Config, Executor, Kind, PoolSpec, Task};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug)]
pub(super) struct Pool {
    /// Calls in flight per actor started, by slot; None once that actor was stopped.
    load: Vec<Option<u32>>,
    min_size: usize,
    initial_size: usize,
    max_size: usize,
    per_actor: u32,
    /// When the pool last started actors (the caller's clock, ms): scale-down waits
    /// `pool_downscale_debounce_ms` after it.
    grew_at_ms: u64,
}

impl Pool {
    fn live(&self) -> usize {
        self.load.iter().flatten().count()
    }

    /// The slot for the next call: the least-loaded live actor, or None when every
    /// one is full and the pool may grow.
    fn pick(&self) -> Option<usize> {
        let least = (0..self.load.len()).filter_map(|i| self.load[i].map(|l| (l, i))).min();
        match least {
            Some((load, i)) if load < self.per_actor || self.live() >= self.max_size => Some(i),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct MapState {
    reads: VecDeque<(usize, u64)>,
    reading: bool,
    pending: Vec<BundleId>,
    pending_rows: u64,
    pending_bytes: u64,
    batch_rows: Option<u64>,
    max_in_flight: usize,
    in_flight: usize,
    pool: Option<Pool>,
    next_seq: u64,
    next_emit: u64,
    /// Finished tasks' outputs by submission order, waiting for their turn.
    finished: BTreeMap<u64, Option<BundleId>>,
}

impl Pool {
    fn new(spec: PoolSpec, cluster_cpus: u32) -> Self {
        let max_size = spec.max_size.unwrap_or(cluster_cpus).max(spec.initial_size).max(1) as usize;
        let initial_size = (spec.initial_size as usize).clamp(1, max_size);
        Pool {
            load: Vec::new(),
            min_size: (spec.min_size as usize).clamp(1, initial_size),
            initial_size,
            max_size,
            per_actor: spec.per_actor.max(1),
            grew_at_ms: 0,
        }
    }
}

impl MapState {
    /// A map over read tasks (`reads`: their estimated output bytes) or over its input's blocks.
    pub(super) fn new(
        reads: Option<Vec<u64>>,
        batch_rows: Option<u64>,
        concurrency: Option<u32>,
        pool: Option<PoolSpec>,
        config: &Config,
    ) -> Self {
        let pool = pool.map(|p| Pool::new(p, config.cluster_cpus));
        let max_in_flight = match &pool {
            Some(pool) => pool.max_size * pool.per_actor as usize,
            None => concurrency.unwrap_or(config.max_tasks).max(1) as usize,
        };
        MapState {
            reading: reads.is_some(),
            reads: reads.unwrap_or_default().into_iter().enumerate().collect(),
            batch_rows,
            max_in_flight,
            pool,
            ..MapState::default()
        }
    }

    /// It maps its input's blocks and has room for another task.
    pub(super) fn wants_input(&self) -> bool {
        !self.reading && self.in_flight < self.max_in_flight
    }

    pub(super) fn has_pool(&self) -> bool {
        self.pool.is_some()
    }

    /// The operator was cut off: forgets its reads and tasks, and hands back the
    /// blocks it held (gathered inputs and finished outputs) to drop.
    pub(super) fn abandon(&mut self) -> Vec<BundleId> {
        let mut held = std::mem::take(&mut self.pending);
        held.extend(std::mem::take(&mut self.finished).into_values().flatten());
        self.reads.clear();
        self.reading = false;
        self.in_flight = 0;
        held
    }
}

impl Executor {
    fn map_state(&mut self, op: usize) -> &mut MapState {
        match &mut self.ops[op].kind {
            Kind::Map(map) => map,
            _ => unreachable!("operator {op} is a map"),
        }
    }

    fn can_submit(&mut self, op: usize, est: u64) -> bool {
        let fits = self.used + est <= self.config.budget_bytes;
        let map = self.map_state(op);
        map.in_flight < map.max_in_flight && (map.in_flight == 0 || fits)
    }

    /// Whether an exchange (all-to-all) upstream of `op` still has tasks to run.
    fn exchange_running_upstream(&self, op: usize) -> bool {
        let mut stack = self.ops[op].inputs.clone();
        while let Some(i) = stack.pop() {
            if matches!(self.ops[i].kind, Kind::AllToAll { .. }) && !self.ops[i].done {
                return true;
            }
            stack.extend(&self.ops[i].inputs);
        }
        false
    }

    pub(super) fn step_map(&mut self, op: usize) -> bool {
        // A pool's actors hold their CPUs until the operator ends: started while an exchange
        // upstream still runs tasks, they could take every CPU those tasks wait for (a deadlock
        // on a small cluster). The pool waits for the exchange to end.
        if self.map_state(op).pool.is_some() && self.exchange_running_upstream(op) {
            let input = self.ops[op].inputs.first().copied();
            return input.is_some_and(|input| self.want(input));
        }
        let mut moved = false;
        // A pool's first actors start when its operator first runs.
        let now = self.now_ms;
        if let Some(pool) = self.map_state(op).pool.as_mut()
            && pool.load.is_empty()
        {
            pool.load.resize(pool.initial_size, Some(0));
            pool.grew_at_ms = now;
            for actor in 0..pool.initial_size {
                self.actions.push(Action::StartActor { op, actor });
            }
            moved = true;
        }
        if self.map_state(op).reading {
            while let Some(&(read, est)) = self.map_state(op).reads.front() {
                if !self.can_submit(op, est) {
                    break;
                }
                self.map_state(op).reads.pop_front();
                self.submit(op, Some(read), Vec::new(), est);
                moved = true;
            }
            if self.map_state(op).reads.is_empty() {
                self.map_state(op).reading = false;
            }
        } else if let Some(&input) = self.ops[op].inputs.first() {
            loop {
                let batch_rows = self.map_state(op).batch_rows;
                let map = self.map_state(op);
                let ready = !map.pending.is_empty() && batch_rows.is_none_or(|b| map.pending_rows >= b);
                // A full batch, or the rest (fewer rows than a batch) once the input is over.
                let rest = !map.pending.is_empty() && self.exhausted(input);
                if ready || rest {
                    if !self.submit_pending(op) {
                        break;
                    }
                    moved = true;
                    continue;
                }
                if let Some(bundle) = self.ops[input].out.pop_front() {
                    let (rows, bytes) = self.bundles[&bundle];
                    let map = self.map_state(op);
                    map.pending.push(bundle);
                    map.pending_rows += rows;
                    map.pending_bytes += bytes;
                    moved = true;
                    continue;
                }
                if self.want(input) {
                    moved = true;
                }
                break;
            }
        }
        let input_over = self.ops[op].inputs.first().is_none_or(|&i| self.exhausted(i));
        let map = self.map_state(op);
        if !map.reading && input_over && map.pending.is_empty() && map.in_flight == 0 && map.finished.is_empty() {
            self.finish(op);
            moved = true;
        } else if let Some(actor) = self.idle_actor_to_stop(op) {
            self.actions.push(Action::StopActor { op, actor });
            moved = true;
        }
        moved
    }

    /// As Ray's actor autoscaler: a pool above its minimum whose calls in flight per actor
    /// are at or below the scale-down threshold, and that has not grown within the
    /// debounce period, gives up one idle actor (marked stopped here).
    fn idle_actor_to_stop(&mut self, op: usize) -> Option<usize> {
        let (util, debounce, now) =
            (self.config.pool_downscale_util, self.config.pool_downscale_debounce_ms, self.now_ms);
        let received = self.ops[op].stats.tasks > 0;
        let map = self.map_state(op);
        let in_flight = map.in_flight as f64;
        let pool = map.pool.as_mut()?;
        let live = pool.live();
        if !received || live <= pool.min_size || in_flight > util * live as f64 {
            return None;
        }
        if now < pool.grew_at_ms.saturating_add(debounce) {
            return None;
        }
        let idle = (0..pool.load.len()).rev().find(|&i| pool.load[i] == Some(0))?;
        pool.load[idle] = None;
        Some(idle)
    }

    /// Submits the gathered inputs as one task, if the budget and slots allow.
    fn submit_pending(&mut self, op: usize) -> bool {
        let est = self.map_state(op).pending_bytes;
        if !self.can_submit(op, est) {
            return false;
        }
        let map = self.map_state(op);
        let inputs = std::mem::take(&mut map.pending);
        map.pending_rows = 0;
        map.pending_bytes = 0;
        self.submit(op, None, inputs, est);
        true
    }

    fn submit(&mut self, op: usize, read: Option<usize>, inputs: Vec<BundleId>, est: u64) {
        let task = self.id();
        let mut start_actor = None;
        let now = self.now_ms;
        let map = self.map_state(op);
        let actor = map.pool.as_mut().map(|pool| {
            let actor = pool.pick().unwrap_or_else(|| {
                pool.load.push(Some(0));
                pool.grew_at_ms = now;
                start_actor = Some(pool.load.len() - 1);
                pool.load.len() - 1
            });
            pool.load[actor] = Some(pool.load[actor].unwrap_or(0) + 1);
            actor
        });
        map.in_flight += 1;
        let seq = map.next_seq;
        map.next_seq += 1;
        let in_flight = map.in_flight as u64;
        if let Some(actor) = start_actor {
            self.actions.push(Action::StartActor { op, actor });
        }
        self.reserve(est);
        let stats = &mut self.ops[op].stats;
        stats.start();
        stats.tasks += 1;
        stats.in_flight = in_flight;
        self.tasks.insert(task, Task { op, inputs: inputs.clone(), est, actor, seq });
        self.actions.push(Action::Submit { task, op, read, inputs, actor });
    }

    /// A map task finished: its output joins the operator's, in submission order when
    /// the execution preserves order.
    pub(super) fn map_task_done(&mut self, op: usize, task: &Task, bundle: Option<BundleId>) {
        let preserve_order = self.config.preserve_order;
        let map = self.map_state(op);
        map.in_flight -= 1;
        if let (Some(pool), Some(actor)) = (map.pool.as_mut(), task.actor)
            && let Some(load) = pool.load[actor].as_mut()
        {
            *load -= 1;
        }
        let in_flight = map.in_flight as u64;
        if preserve_order {
            map.finished.insert(task.seq, bundle);
            let mut ready = Vec::new();
            while let Some(entry) = map.finished.first_entry() {
                if *entry.key() != map.next_emit {
                    break;
                }
                ready.extend(entry.remove());
                map.next_emit += 1;
            }
            self.ops[op].out.extend(ready);
        } else {
            self.ops[op].out.extend(bundle);
        }
        self.ops[op].stats.in_flight = in_flight;
    }
}
