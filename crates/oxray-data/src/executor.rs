//! The streaming executor's scheduler: a state machine that decides which read,
//! map, slice, shuffle and repartition tasks run, in what order, and when, so
//! the bytes in flight stay within the execution's budget.
//!
//! It does no I/O. Its caller (the Python driver in `oxray.data`) performs the
//! [`Action`]s it queues (submitting tasks, pulling a block from a local read
//! stream, cancelling) and reports what happened ([`Executor::task_done`],
//! [`Executor::local_block`], [`Executor::release`]). Blocks are named by
//! [`BundleId`]; the caller holds their data.
//!
//! Operators form a tree given bottom-up: each names its inputs by index, and
//! the last one is the output. Map operators submit eagerly while the budget
//! allows (always at least one task each, so the pipeline cannot stall); local
//! reads, limits and unions move only when their consumer needs input.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

pub type BundleId = u64;

/// The most partitions an exchange picks by itself for data large beside its budget.
const MAX_DEFAULT_PARTITIONS: u64 = 1000;
pub type TaskId = u64;
/// `(index into the inputs, offset, rows)`: one slice of an input block.
pub type SlicePiece = (usize, u64, u64);

/// The kind of an all-to-all operator.
#[derive(Clone, Debug, PartialEq)]
pub enum AllToAll {
    RandomShuffle { seed: Option<u64>, num_blocks: Option<u64> },
    RandomizeBlockOrder { seed: Option<u64> },
    Repartition { num_blocks: Option<u64>, target_rows_per_block: Option<u64> },
}

/// A class UDF's actor pool: starts with `initial_size`, grows by one (up to
/// `max_size`) whenever every actor already has `per_actor` calls, and shrinks
/// by one idle actor at a time (down to `min_size`) while it is little used.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSpec {
    pub min_size: u32,
    pub initial_size: u32,
    pub max_size: Option<u32>,
    pub per_actor: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum OpSpec {
    /// Blocks read in the caller's process, pulled one at a time.
    LocalRead,
    /// One task per read task (`reads`: their estimated output bytes) or per
    /// bundle of input blocks (at least `batch_rows` rows when set).
    Map {
        reads: Option<Vec<u64>>,
        batch_rows: Option<u64>,
        concurrency: Option<u32>,
        pool: Option<PoolSpec>,
    },
    Limit {
        n: u64,
    },
    AllToAll(AllToAll),
    /// Its inputs' outputs, one input after the other.
    Union,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub budget_bytes: u64,
    /// Tasks in flight per map operator without a concurrency of its own.
    pub max_tasks: u32,
    pub cluster_cpus: u32,
    pub preserve_order: bool,
    /// Ray's `actor_pool_util_downscaling_threshold`: a pool whose calls in flight per
    /// actor fall to this or below stops one idle actor.
    pub pool_downscale_util: f64,
    /// Ray's scale-down debounce: no actor stops this soon after the pool grew.
    pub pool_downscale_debounce_ms: u64,
}

/// What the caller must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Read the next block of local read `op`, then call `local_block` or `local_done`.
    PullLocal { op: usize },
    /// Start actor `actor` of `op`'s pool.
    StartActor { op: usize, actor: usize },
    /// Actor `actor` of `op`'s pool is idle and no longer needed: it may exit in its own time.
    StopActor { op: usize, actor: usize },
    /// Run `op`'s UDFs on read task `read` or on the blocks of `inputs`, on
    /// `actor` of its pool when it has one; report with `task_done`.
    Submit { task: TaskId, op: usize, read: Option<usize>, inputs: Vec<BundleId>, actor: Option<usize> },
    /// `out` is the first `rows` rows of `bundle` (which stays alive).
    Slice { bundle: BundleId, rows: u64, out: BundleId },
    /// A random shuffle of `inputs`: a map task per input (seeded
    /// `map_seeds[i]`) dealing its rows into one part per output task, then
    /// output task `outputs[j].0` (seeded `outputs[j].1`) joins part j of each.
    Shuffle { op: usize, inputs: Vec<BundleId>, map_seeds: Vec<u64>, outputs: Vec<(TaskId, u64)> },
    /// Each output task joins `(index into inputs, offset, rows)` slices.
    Slices { op: usize, inputs: Vec<BundleId>, outputs: Vec<(TaskId, Vec<SlicePiece>)> },
    /// The bundle is consumed: drop it.
    Release { bundle: BundleId },
    /// The task's output is no longer needed.
    Cancel { task: TaskId },
    /// `op`'s actors are no longer needed: `cancelled` when their operator was cut short (calls
    /// may still run: kill them), else it finished (they may exit in their own time).
    StopActors { op: usize, cancelled: bool },
}

/// What one operator did, for `stats()` and progress.
#[derive(Clone, Debug, Default)]
pub struct OpStats {
    pub name: String,
    pub started: Option<Instant>,
    pub finished: Option<Instant>,
    pub cpu_s: f64,
    pub task_wall_s: f64,
    pub rows: u64,
    pub bytes: u64,
    pub blocks: u64,
    pub tasks: u64,
    pub in_flight: u64,
}

impl OpStats {
    fn start(&mut self) {
        self.started.get_or_insert_with(Instant::now);
    }

    fn output(&mut self, rows: u64, bytes: u64, blocks: u64) {
        self.rows += rows;
        self.bytes += bytes;
        self.blocks += blocks;
        self.finished = Some(Instant::now());
    }

    pub fn wall_s(&self) -> f64 {
        match self.started {
            None => 0.0,
            Some(start) => self.finished.unwrap_or_else(Instant::now).duration_since(start).as_secs_f64(),
        }
    }
}

/// What a finished task reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct TaskOutput {
    pub rows: u64,
    pub bytes: u64,
    pub blocks: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
}

#[derive(Debug)]
struct Pool {
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
struct MapState {
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

#[derive(Debug)]
enum Kind {
    LocalRead {
        pulling: bool,
    },
    Map(MapState),
    Limit {
        remaining: u64,
    },
    AllToAll {
        spec: AllToAll,
        gathered: Vec<BundleId>,
        outputs: VecDeque<(TaskId, Option<Option<BundleId>>)>,
        started: bool,
    },
    Union {
        current: usize,
    },
}

#[derive(Debug)]
struct Op {
    inputs: Vec<usize>,
    kind: Kind,
    out: VecDeque<BundleId>,
    /// No more output will be added to `out`.
    done: bool,
    stats: OpStats,
}

#[derive(Debug)]
struct Task {
    op: usize,
    inputs: Vec<BundleId>,
    est: u64,
    actor: Option<usize>,
    seq: u64,
}

#[derive(Debug)]
pub struct Executor {
    ops: Vec<Op>,
    /// The operator that consumes each operator (none for the output).
    consumer: Vec<Option<usize>>,
    config: Config,
    bundles: HashMap<BundleId, (u64, u64)>,
    tasks: HashMap<TaskId, Task>,
    next_id: u64,
    used: u64,
    peak: u64,
    actions: Vec<Action>,
    /// The caller's clock at the last `poll_at` (ms); only the pool's scale-down reads it.
    now_ms: u64,
}

impl Executor {
    /// `specs` bottom-up with their input indices; the last is the output.
    pub fn new(specs: Vec<(OpSpec, String, Vec<usize>)>, config: Config) -> Result<Self, String> {
        if specs.is_empty() {
            return Err("an execution needs at least one operator".into());
        }
        let mut consumer = vec![None; specs.len()];
        let mut ops = Vec::with_capacity(specs.len());
        for (index, (spec, name, inputs)) in specs.into_iter().enumerate() {
            let wanted = match spec {
                OpSpec::LocalRead => 0..=0,
                OpSpec::Map { reads: Some(_), .. } => 0..=0,
                OpSpec::Union => 1..=usize::MAX,
                _ => 1..=1,
            };
            if !wanted.contains(&inputs.len()) {
                return Err(format!("operator {index} ({name}) has {} inputs, expected {wanted:?}", inputs.len()));
            }
            for &input in &inputs {
                if input >= index || consumer[input].is_some() {
                    return Err(format!("operator {index} ({name}): input {input} is not an earlier, unused operator"));
                }
                consumer[input] = Some(index);
            }
            let kind = match spec {
                OpSpec::LocalRead => Kind::LocalRead { pulling: false },
                OpSpec::Map { reads, batch_rows, concurrency, pool } => {
                    let pool = pool.map(|p| {
                        let max_size = p.max_size.unwrap_or(config.cluster_cpus).max(p.initial_size).max(1) as usize;
                        let initial_size = (p.initial_size as usize).clamp(1, max_size);
                        Pool {
                            load: Vec::new(),
                            min_size: (p.min_size as usize).clamp(1, initial_size),
                            initial_size,
                            max_size,
                            per_actor: p.per_actor.max(1),
                            grew_at_ms: 0,
                        }
                    });
                    let max_in_flight = match &pool {
                        Some(pool) => pool.max_size * pool.per_actor as usize,
                        None => concurrency.unwrap_or(config.max_tasks).max(1) as usize,
                    };
                    Kind::Map(MapState {
                        reading: reads.is_some(),
                        reads: reads.unwrap_or_default().into_iter().enumerate().collect(),
                        batch_rows,
                        max_in_flight,
                        pool,
                        ..MapState::default()
                    })
                }
                OpSpec::Limit { n } => Kind::Limit { remaining: n },
                OpSpec::AllToAll(spec) => {
                    Kind::AllToAll { spec, gathered: Vec::new(), outputs: VecDeque::new(), started: false }
                }
                OpSpec::Union => Kind::Union { current: 0 },
            };
            ops.push(Op {
                inputs,
                kind,
                out: VecDeque::new(),
                done: false,
                stats: OpStats { name, ..OpStats::default() },
            });
        }
        if consumer[..ops.len() - 1].iter().any(Option::is_none) {
            return Err("every operator but the last must feed another".into());
        }
        Ok(Self {
            ops,
            consumer,
            config,
            bundles: HashMap::new(),
            tasks: HashMap::new(),
            next_id: 1,
            used: 0,
            peak: 0,
            actions: Vec::new(),
            now_ms: 0,
        })
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn reserve(&mut self, bytes: u64) {
        self.used += bytes;
        self.peak = self.peak.max(self.used);
    }

    fn unreserve(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }

    fn new_bundle(&mut self, rows: u64, bytes: u64) -> BundleId {
        let id = self.id();
        self.bundles.insert(id, (rows, bytes));
        self.reserve(bytes);
        id
    }

    /// The caller is done with `bundle` (an output it consumed, or one dropped).
    pub fn release(&mut self, bundle: BundleId) {
        if let Some((_, bytes)) = self.bundles.remove(&bundle) {
            self.unreserve(bytes);
        }
    }

    fn drop_bundle(&mut self, bundle: BundleId) {
        self.release(bundle);
        self.actions.push(Action::Release { bundle });
    }

    /// Whether `op` may run now (it is not behind a union input still waiting).
    fn active(&self, op: usize) -> bool {
        let mut child = op;
        while let Some(parent) = self.consumer[child] {
            if let Kind::Union { current } = self.ops[parent].kind
                && self.ops[parent].inputs.get(current) != Some(&child)
            {
                return false;
            }
            child = parent;
        }
        true
    }

    fn exhausted(&self, op: usize) -> bool {
        self.ops[op].done && self.ops[op].out.is_empty()
    }

    /// Runs the schedule until nothing more can move, and hands over the actions
    /// to perform (in order).
    pub fn poll(&mut self) -> Vec<Action> {
        self.poll_at(self.now_ms)
    }

    /// `poll` at the caller's clock `now_ms` (milliseconds, never going back), which
    /// paces the pools' scale-down.
    pub fn poll_at(&mut self, now_ms: u64) -> Vec<Action> {
        self.now_ms = self.now_ms.max(now_ms);
        let root = self.ops.len() - 1;
        loop {
            let mut moved = false;
            // Consumers first: what they take frees budget for their inputs.
            for op in (0..self.ops.len()).rev() {
                if !self.ops[op].done && self.active(op) {
                    moved |= self.step(op);
                }
            }
            if self.ops[root].out.is_empty() && !self.ops[root].done {
                moved |= self.want(root);
            }
            if !moved {
                break;
            }
        }
        std::mem::take(&mut self.actions)
    }

    /// `op`'s consumer needs input from it: makes demand-driven operators move.
    fn want(&mut self, op: usize) -> bool {
        if self.ops[op].done || !self.ops[op].out.is_empty() {
            return false;
        }
        let input = match &mut self.ops[op].kind {
            Kind::LocalRead { pulling } => {
                if *pulling {
                    return false;
                }
                *pulling = true;
                None
            }
            Kind::Limit { .. } | Kind::AllToAll { started: false, .. } => Some(0),
            Kind::Union { current } => Some(*current),
            Kind::Map(map) if !map.reading && map.in_flight < map.max_in_flight => Some(0),
            Kind::Map(_) | Kind::AllToAll { .. } => return false,
        };
        match input {
            None => {
                self.ops[op].stats.start();
                self.actions.push(Action::PullLocal { op });
                true
            }
            Some(i) => match self.ops[op].inputs.get(i) {
                Some(&input) => self.want(input),
                None => false, // a map over read tasks
            },
        }
    }

    /// One scheduling pass over `op`; whether anything changed.
    fn step(&mut self, op: usize) -> bool {
        match self.ops[op].kind {
            Kind::LocalRead { .. } => false,
            Kind::Map(_) => self.step_map(op),
            Kind::Limit { .. } => self.step_limit(op),
            Kind::AllToAll { .. } => self.step_all_to_all(op),
            Kind::Union { .. } => self.step_union(op),
        }
    }

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

    fn step_map(&mut self, op: usize) -> bool {
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

    /// Task `task` finished with `output`; returns its output bundle, if it made blocks.
    pub fn task_done(&mut self, task: TaskId, output: TaskOutput) -> Option<BundleId> {
        let task = self.tasks.remove(&task)?;
        let op = task.op;
        self.unreserve(task.est);
        for bundle in task.inputs {
            self.drop_bundle(bundle);
        }
        let bundle = (output.blocks > 0).then(|| self.new_bundle(output.rows, output.bytes));
        let stats = &mut self.ops[op].stats;
        stats.cpu_s += output.cpu_s;
        stats.task_wall_s += output.wall_s;
        stats.output(output.rows, output.bytes, output.blocks);
        let preserve_order = self.config.preserve_order;
        match &mut self.ops[op].kind {
            Kind::Map(map) => {
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
            Kind::AllToAll { outputs, .. } => {
                // Outputs go out in order.
                if let Some(slot) = outputs.iter_mut().find(|(id, _)| *id == task.seq) {
                    slot.1 = Some(bundle);
                }
                let mut ready = Vec::new();
                while let Some((_, Some(_))) = outputs.front() {
                    let (_, done) = outputs.pop_front().expect("a front entry");
                    ready.extend(done.flatten());
                }
                self.ops[op].out.extend(ready);
            }
            _ => unreachable!("only maps and all-to-alls run tasks"),
        }
        bundle
    }

    /// Local read `op` produced a block (its CPU time so far: `cpu_s`).
    pub fn local_block(&mut self, op: usize, rows: u64, bytes: u64, cpu_s: f64) -> BundleId {
        let bundle = self.new_bundle(rows, bytes);
        let node = &mut self.ops[op];
        if let Kind::LocalRead { pulling } = &mut node.kind {
            *pulling = false;
        }
        node.stats.output(rows, bytes, 1);
        node.stats.cpu_s = cpu_s;
        if node.done {
            // Cancelled while the block was read.
            self.drop_bundle(bundle);
        } else {
            node.out.push_back(bundle);
        }
        bundle
    }

    /// Local read `op` has no more blocks.
    pub fn local_done(&mut self, op: usize) {
        if let Kind::LocalRead { pulling } = &mut self.ops[op].kind {
            *pulling = false;
        }
        self.ops[op].done = true;
    }

    /// A `Slice` action's output (its size is known once it is cut).
    pub fn sliced(&mut self, bundle: BundleId, bytes: u64) {
        if let Some(entry) = self.bundles.get_mut(&bundle) {
            let old = std::mem::replace(&mut entry.1, bytes);
            self.unreserve(old);
            self.reserve(bytes);
        }
    }

    fn step_limit(&mut self, op: usize) -> bool {
        let input = self.ops[op].inputs[0];
        if let Kind::Limit { remaining: 0 } = self.ops[op].kind {
            self.cut_off(op);
            return true;
        }
        let mut moved = false;
        while let Some(bundle) = self.ops[input].out.pop_front() {
            moved = true;
            let Kind::Limit { remaining } = &mut self.ops[op].kind else { unreachable!() };
            let (rows, bytes) = self.bundles[&bundle];
            if rows <= *remaining {
                *remaining -= rows;
                let done = *remaining == 0;
                self.ops[op].stats.start();
                self.ops[op].stats.output(rows, bytes, 1);
                self.ops[op].out.push_back(bundle);
                if done {
                    self.cut_off(op);
                    return true;
                }
                continue;
            }
            let keep = std::mem::replace(remaining, 0);
            let out = self.new_bundle(keep, bytes * keep / rows.max(1));
            self.actions.push(Action::Slice { bundle, rows: keep, out });
            self.drop_bundle(bundle);
            self.ops[op].stats.start();
            self.ops[op].stats.output(keep, bytes * keep / rows.max(1), 1);
            self.ops[op].out.push_back(out);
            self.cut_off(op);
            return true;
        }
        if self.exhausted(input) {
            self.finish(op);
            moved = true;
        }
        moved
    }

    /// `op` has all it needs: it is done, and everything upstream stops.
    fn cut_off(&mut self, op: usize) {
        self.ops[op].done = true;
        let inputs = self.ops[op].inputs.clone();
        for input in inputs {
            self.cancel(input);
        }
    }

    fn cancel(&mut self, op: usize) {
        let inputs = self.ops[op].inputs.clone();
        for input in inputs {
            self.cancel(input);
        }
        let node = &mut self.ops[op];
        node.done = true;
        let mut dropped: Vec<BundleId> = node.out.drain(..).collect();
        match &mut node.kind {
            Kind::Map(map) => {
                dropped.append(&mut map.pending);
                dropped.extend(map.finished.values().flatten());
                map.finished.clear();
                map.reads.clear();
                map.reading = false;
                map.in_flight = 0;
            }
            Kind::AllToAll { gathered, outputs, .. } => {
                dropped.append(gathered);
                dropped.extend(outputs.iter().filter_map(|(_, b)| b.flatten()));
                outputs.clear();
            }
            _ => {}
        }
        let has_pool = matches!(&node.kind, Kind::Map(MapState { pool: Some(_), .. }));
        for bundle in dropped {
            self.drop_bundle(bundle);
        }
        let mut cancelled: Vec<TaskId> = self.tasks.iter().filter(|(_, t)| t.op == op).map(|(&id, _)| id).collect();
        cancelled.sort_unstable();
        for id in cancelled {
            let task = self.tasks.remove(&id).expect("listed above");
            self.unreserve(task.est);
            for bundle in task.inputs {
                self.drop_bundle(bundle);
            }
            self.actions.push(Action::Cancel { task: id });
        }
        if has_pool {
            self.actions.push(Action::StopActors { op, cancelled: true });
        }
    }

    fn finish(&mut self, op: usize) {
        if self.ops[op].done {
            return;
        }
        self.ops[op].done = true;
        if let Kind::Map(MapState { pool: Some(_), .. }) = self.ops[op].kind {
            self.actions.push(Action::StopActors { op, cancelled: false });
        }
    }

    fn step_all_to_all(&mut self, op: usize) -> bool {
        let input = self.ops[op].inputs[0];
        let Kind::AllToAll { started, .. } = &self.ops[op].kind else { unreachable!() };
        if !*started {
            let mut moved = false;
            while let Some(bundle) = self.ops[input].out.pop_front() {
                let Kind::AllToAll { gathered, .. } = &mut self.ops[op].kind else { unreachable!() };
                gathered.push(bundle);
                moved = true;
            }
            if !self.exhausted(input) {
                return moved;
            }
            self.ops[op].stats.start();
            self.start_all_to_all(op);
            return true;
        }
        let Kind::AllToAll { outputs, .. } = &self.ops[op].kind else { unreachable!() };
        if outputs.is_empty() {
            self.finish(op);
            return true;
        }
        false
    }

    fn start_all_to_all(&mut self, op: usize) {
        let Kind::AllToAll { spec, gathered, started, .. } = &mut self.ops[op].kind else { unreachable!() };
        *started = true;
        let spec = spec.clone();
        let gathered = std::mem::take(gathered);
        let (inputs, empty): (Vec<BundleId>, Vec<BundleId>) =
            gathered.iter().partition(|b| self.bundles.get(b).is_some_and(|(rows, _)| *rows > 0));
        match spec {
            AllToAll::RandomizeBlockOrder { seed } => {
                let mut order = gathered;
                order.shuffle(&mut rng(seed));
                for &bundle in &order {
                    let (rows, bytes) = self.bundles[&bundle];
                    self.ops[op].stats.output(rows, bytes, 1);
                }
                self.ops[op].out.extend(order);
                return;
            }
            AllToAll::RandomShuffle { seed, num_blocks } => {
                let total_bytes: u64 = inputs.iter().map(|b| self.bundles[b].1).sum();
                let n_out = num_blocks.unwrap_or_else(|| self.default_partitions(inputs.len(), total_bytes)).max(1);
                let mut rng = rng(seed);
                let map_seeds: Vec<u64> = inputs.iter().map(|_| rand::Rng::random::<u64>(&mut rng) >> 2).collect();
                let outputs: Vec<(TaskId, u64)> =
                    (0..n_out).map(|_| (self.id(), rand::Rng::random::<u64>(&mut rng) >> 2)).collect();
                self.expect_outputs(op, outputs.iter().map(|(t, _)| *t));
                if !inputs.is_empty() {
                    self.actions.push(Action::Shuffle { op, inputs: inputs.clone(), map_seeds, outputs });
                } else {
                    self.clear_outputs(op);
                }
            }
            AllToAll::Repartition { num_blocks, target_rows_per_block } => {
                let rows: Vec<u64> = inputs.iter().map(|b| self.bundles[b].0).collect();
                let total: u64 = rows.iter().sum();
                let n_out = match target_rows_per_block {
                    Some(target) => total.div_ceil(target.max(1)).max(1),
                    None => num_blocks.unwrap_or(1).max(1),
                };
                let per = total.div_ceil(n_out);
                let bounds: Vec<(u64, u64)> =
                    (0..n_out).map(|j| ((j * per).min(total), ((j + 1) * per).min(total))).collect();
                let outputs: Vec<(TaskId, Vec<SlicePiece>)> =
                    slice_pieces(&rows, &bounds).into_iter().map(|pieces| (self.id(), pieces)).collect();
                self.expect_outputs(op, outputs.iter().map(|(t, _)| *t));
                if !inputs.is_empty() {
                    self.actions.push(Action::Slices { op, inputs: inputs.clone(), outputs });
                } else {
                    self.clear_outputs(op);
                }
            }
        }
        // The tasks' arguments keep the blocks alive from here on.
        for bundle in inputs.into_iter().chain(empty) {
            self.drop_bundle(bundle);
        }
    }

    /// An exchange's output partitions when the user named none: one per input block, as in
    /// Ray, or more when the data is large beside the budget, so the reduce tasks running at
    /// once (one per CPU) each hold a partition in and one out within it.
    fn default_partitions(&self, inputs: usize, total_bytes: u64) -> u64 {
        let per_partition = (self.config.budget_bytes / (2 * u64::from(self.config.cluster_cpus.max(1)))).max(1 << 20);
        let needed = total_bytes.div_ceil(per_partition).min(MAX_DEFAULT_PARTITIONS);
        (inputs as u64).max(needed)
    }

    fn expect_outputs(&mut self, op: usize, tasks: impl Iterator<Item = TaskId>) {
        let tasks: Vec<TaskId> = tasks.collect();
        for &task in &tasks {
            self.tasks.insert(task, Task { op, inputs: Vec::new(), est: 0, actor: None, seq: task });
        }
        self.ops[op].stats.tasks += tasks.len() as u64;
        if let Kind::AllToAll { outputs, .. } = &mut self.ops[op].kind {
            outputs.extend(tasks.into_iter().map(|t| (t, None)));
        }
    }

    fn clear_outputs(&mut self, op: usize) {
        if let Kind::AllToAll { outputs, .. } = &mut self.ops[op].kind {
            for (task, _) in outputs.drain(..) {
                self.tasks.remove(&task);
            }
        }
    }

    fn step_union(&mut self, op: usize) -> bool {
        let mut moved = false;
        loop {
            let Kind::Union { current } = self.ops[op].kind else { unreachable!() };
            let Some(&input) = self.ops[op].inputs.get(current) else {
                self.finish(op);
                return true;
            };
            while let Some(bundle) = self.ops[input].out.pop_front() {
                self.ops[op].out.push_back(bundle);
                moved = true;
            }
            if !self.exhausted(input) {
                return moved;
            }
            let Kind::Union { current } = &mut self.ops[op].kind else { unreachable!() };
            *current += 1;
            moved = true;
        }
    }

    /// The next output block, with its rows and bytes.
    pub fn next_output(&mut self) -> Option<(BundleId, u64, u64)> {
        let root = self.ops.len() - 1;
        let bundle = self.ops[root].out.pop_front()?;
        let (rows, bytes) = self.bundles[&bundle];
        Some((bundle, rows, bytes))
    }

    /// Every output was handed out.
    pub fn finished(&self) -> bool {
        self.exhausted(self.ops.len() - 1)
    }

    /// Tasks submitted and not yet reported.
    pub fn tasks_in_flight(&self) -> usize {
        self.tasks.len()
    }

    pub fn used_bytes(&self) -> u64 {
        self.used
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak
    }

    pub fn op_stats(&self) -> impl Iterator<Item = &OpStats> {
        self.ops.iter().map(|op| &op.stats)
    }
}

fn rng(seed: Option<u64>) -> StdRng {
    match seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_os_rng(),
    }
}

/// For each `(lo, hi)` row range over blocks of `rows` rows each, the
/// `(block, offset, rows)` slices that make it up (an empty range keeps an
/// empty slice of the first block, so its task still has a schema).
pub fn slice_pieces(rows: &[u64], bounds: &[(u64, u64)]) -> Vec<Vec<SlicePiece>> {
    let mut starts = Vec::with_capacity(rows.len() + 1);
    starts.push(0u64);
    for r in rows {
        starts.push(starts.last().expect("not empty") + r);
    }
    let mut out = Vec::with_capacity(bounds.len());
    for &(lo, hi) in bounds {
        let mut pieces = Vec::new();
        for (i, window) in starts.windows(2).enumerate() {
            let (a, b) = (lo.max(window[0]), hi.min(window[1]));
            if a < b {
                pieces.push((i, a - window[0], b - a));
            }
        }
        if pieces.is_empty() && !rows.is_empty() {
            pieces.push((0, 0, 0));
        }
        if !pieces.is_empty() {
            out.push(pieces);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(budget_bytes: u64, preserve_order: bool) -> Config {
        Config {
            budget_bytes,
            max_tasks: 4,
            cluster_cpus: 2,
            preserve_order,
            pool_downscale_util: 0.5,
            pool_downscale_debounce_ms: 10_000,
        }
    }

    fn map_reads(n: usize, est: u64) -> OpSpec {
        OpSpec::Map { reads: Some(vec![est; n]), batch_rows: None, concurrency: None, pool: None }
    }

    fn map_inputs(batch_rows: Option<u64>) -> OpSpec {
        OpSpec::Map { reads: None, batch_rows, concurrency: None, pool: None }
    }

    fn out(rows: u64, bytes: u64) -> TaskOutput {
        TaskOutput { rows, bytes, blocks: 1, ..TaskOutput::default() }
    }

    fn submits(actions: &[Action]) -> Vec<(TaskId, Option<usize>, Vec<BundleId>)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Submit { task, read, inputs, .. } => Some((*task, *read, inputs.clone())),
                _ => None,
            })
            .collect()
    }

    /// The pool actor each submitted call went to, in order.
    fn submitted_actors(actions: &[Action]) -> Vec<Option<usize>> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Submit { actor, .. } => Some(*actor),
                _ => None,
            })
            .collect()
    }

    /// Runs `exec` to the end as a driver would: every task makes `rows`
    /// rows of `bytes` (finishing the newest first, to test ordering), and
    /// every local read yields `local` blocks. Returns the rows of each output.
    fn drain(exec: &mut Executor, rows: u64, bytes: u64, local: usize, submitted: &[Action]) -> Vec<u64> {
        let mut pending: Vec<TaskId> = submits(submitted).into_iter().map(|s| s.0).collect();
        let mut pulled = HashMap::new();
        let mut outputs = Vec::new();
        loop {
            for action in exec.poll() {
                match action {
                    Action::Submit { task, .. } => pending.push(task),
                    Action::Shuffle { outputs, .. } => pending.extend(outputs.iter().map(|o| o.0)),
                    Action::Slices { outputs, .. } => pending.extend(outputs.iter().map(|o| o.0)),
                    Action::PullLocal { op } => {
                        let n = pulled.entry(op).or_insert(0);
                        if *n < local {
                            *n += 1;
                            exec.local_block(op, rows, bytes, 0.0);
                        } else {
                            exec.local_done(op);
                        }
                    }
                    Action::Cancel { task } => pending.retain(|t| *t != task),
                    _ => {}
                }
            }
            if let Some((bundle, rows, _)) = exec.next_output() {
                outputs.push(rows);
                exec.release(bundle);
                continue;
            }
            if exec.finished() {
                return outputs;
            }
            let task = pending.pop().expect("the executor waits on a task");
            exec.task_done(task, out(rows, bytes));
        }
    }

    #[test]
    fn reads_stay_within_the_budget_but_one_always_runs() {
        let mut exec = Executor::new(vec![(map_reads(10, 100), "Read".into(), vec![])], config(250, false)).unwrap();
        let first = submits(&exec.poll());
        assert_eq!(first.len(), 2, "two 100-byte reads fit 250 bytes");
        let mut tiny = Executor::new(vec![(map_reads(3, 100), "Read".into(), vec![])], config(10, false)).unwrap();
        let first = tiny.poll();
        assert_eq!(submits(&first).len(), 1, "one task runs even when it is over the budget");
        assert_eq!(drain(&mut tiny, 5, 100, 0, &first), vec![5, 5, 5]);
        assert!(tiny.peak_bytes() <= 200);
    }

    #[test]
    fn preserve_order_emits_in_submission_order() {
        let mut exec = Executor::new(vec![(map_reads(3, 1), "Read".into(), vec![])], config(1 << 20, true)).unwrap();
        let tasks = submits(&exec.poll());
        assert_eq!(tasks.len(), 3);
        exec.task_done(tasks[2].0, out(3, 1));
        exec.task_done(tasks[1].0, out(2, 1));
        assert_eq!(exec.next_output(), None, "the first task has not finished");
        exec.task_done(tasks[0].0, out(1, 1));
        let rows: Vec<u64> = std::iter::from_fn(|| exec.next_output()).map(|o| o.1).collect();
        assert_eq!(rows, vec![1, 2, 3]);
    }

    #[test]
    fn a_local_read_is_pulled_only_on_demand() {
        let specs = vec![(OpSpec::LocalRead, "Read".into(), vec![]), (map_inputs(None), "Map".into(), vec![0])];
        let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
        let actions = exec.poll();
        assert_eq!(actions, vec![Action::PullLocal { op: 0 }]);
        assert_eq!(exec.poll(), vec![], "one pull at a time");
        exec.local_block(0, 7, 10, 0.0);
        assert_eq!(drain(&mut exec, 7, 10, 4, &[]).iter().sum::<u64>(), 35);
        assert_eq!(exec.used_bytes(), 0, "every block was released");
    }

    #[test]
    fn a_batch_size_bundles_inputs() {
        let specs = vec![(map_reads(5, 1), "Read".into(), vec![]), (map_inputs(Some(25)), "Map".into(), vec![0])];
        let mut exec = Executor::new(specs, config(1 << 20, true)).unwrap();
        // Each read makes 10 rows; each map task sees 30 (25 or more), the last one the rest.
        let mut rows = Vec::new();
        let mut map_inputs_seen = Vec::new();
        let mut pending = Vec::new();
        loop {
            for action in exec.poll() {
                if let Action::Submit { task, op, inputs, .. } = action {
                    pending.push((task, op));
                    if op == 1 {
                        map_inputs_seen.push(inputs.len());
                    }
                }
            }
            if let Some((bundle, r, _)) = exec.next_output() {
                rows.push(r);
                exec.release(bundle);
                continue;
            }
            if exec.finished() {
                break;
            }
            let (task, op) = pending.remove(0);
            let r = if op == 0 { 10 } else { 10 * map_inputs_seen[rows.len()] as u64 };
            exec.task_done(task, out(r, 1));
        }
        assert_eq!(map_inputs_seen, vec![3, 2]);
        assert_eq!(rows, vec![30, 20]);
    }

    #[test]
    fn a_limit_cuts_and_cancels_upstream() {
        let specs =
            vec![(map_reads(100, 1), "Read".into(), vec![]), (OpSpec::Limit { n: 15 }, "Limit".into(), vec![0])];
        let mut exec = Executor::new(specs, config(1 << 20, true)).unwrap();
        let tasks = submits(&exec.poll());
        assert_eq!(tasks.len(), 4, "max_tasks in flight");
        exec.task_done(tasks[0].0, out(10, 10));
        exec.task_done(tasks[1].0, out(10, 10));
        let actions = exec.poll();
        assert!(actions.iter().any(|a| matches!(a, Action::Slice { rows: 5, .. })), "{actions:?}");
        let cancels = actions.iter().filter(|a| matches!(a, Action::Cancel { .. })).count();
        assert_eq!(cancels, 2, "the two reads still running are cancelled");
        let rows: Vec<u64> = std::iter::from_fn(|| exec.next_output()).map(|o| o.1).collect();
        assert_eq!(rows, vec![10, 5]);
        assert!(exec.finished());
        assert_eq!(exec.tasks_in_flight(), 0);
    }

    #[test]
    fn a_union_runs_its_inputs_in_turn() {
        let specs = vec![
            (map_reads(2, 1), "A".into(), vec![]),
            (map_reads(3, 1), "B".into(), vec![]),
            (OpSpec::Union, "Union".into(), vec![0, 1]),
        ];
        let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
        let first = exec.poll();
        assert!(first.iter().all(|a| matches!(a, Action::Submit { op: 0, .. })), "B waits for A: {first:?}");
        assert_eq!(drain(&mut exec, 4, 1, 0, &first).len(), 5);
    }

    #[test]
    fn an_actor_pool_starts_small_and_grows_to_its_max() {
        let pool = PoolSpec { min_size: 1, initial_size: 1, max_size: Some(2), per_actor: 1 };
        let spec = OpSpec::Map { reads: Some(vec![1; 6]), batch_rows: None, concurrency: None, pool: Some(pool) };
        let mut exec = Executor::new(vec![(spec, "Pool".into(), vec![])], config(1 << 20, false)).unwrap();
        let actions = exec.poll();
        let starts = actions.iter().filter(|a| matches!(a, Action::StartActor { .. })).count();
        assert_eq!(starts, 2, "one at first, one more while the first is busy: {actions:?}");
        assert_eq!(submitted_actors(&actions), vec![Some(0), Some(1)], "one call per actor");
        assert_eq!(drain(&mut exec, 1, 1, 0, &actions).len(), 6);
    }

    #[test]
    fn an_idle_pool_shrinks_to_its_minimum_after_the_debounce() {
        let pool = PoolSpec { min_size: 1, initial_size: 1, max_size: Some(3), per_actor: 1 };
        let spec = OpSpec::Map { reads: None, batch_rows: None, concurrency: None, pool: Some(pool) };
        let mut exec = Executor::new(
            vec![(OpSpec::LocalRead, "Read".into(), vec![]), (spec, "Pool".into(), vec![0])],
            config(1 << 20, false),
        )
        .unwrap();
        // Three blocks arrive while every call is still running: the pool grows to three.
        let mut submitted = Vec::new();
        let mut actions = exec.poll_at(0);
        for _ in 0..3 {
            assert!(actions.contains(&Action::PullLocal { op: 0 }), "{actions:?}");
            exec.local_block(0, 1, 1, 0.0);
            actions = exec.poll_at(0);
            submitted.extend(submits(&actions).into_iter().map(|s| s.0));
        }
        let starts = |a: &[Action]| a.iter().filter(|a| matches!(a, Action::StartActor { .. })).count();
        assert_eq!(submitted.len(), 3);
        for task in submitted {
            exec.task_done(task, out(1, 1));
        }
        while let Some((bundle, ..)) = exec.next_output() {
            exec.release(bundle);
        }
        // Idle, but within the debounce after growing: nothing stops.
        let stops = |a: &[Action]| {
            a.iter()
                .filter_map(|a| match a {
                    Action::StopActor { actor, .. } => Some(*actor),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        assert!(stops(&exec.poll_at(9_999)).is_empty());
        // Past it: idle actors stop one by one down to the minimum.
        let actions = exec.poll_at(10_000);
        assert_eq!(stops(&actions), vec![2, 1], "{actions:?}");
        assert!(stops(&exec.poll_at(20_000)).is_empty(), "the minimum stays");
        // More input: the remaining actor takes it; one more grows the pool into a new slot.
        exec.local_block(0, 1, 1, 0.0);
        let actions = exec.poll_at(20_000);
        assert_eq!(starts(&actions), 0);
        exec.local_block(0, 1, 1, 0.0);
        let actions = exec.poll_at(20_000);
        assert!(actions.contains(&Action::StartActor { op: 1, actor: 3 }), "{actions:?}");
        assert_eq!(submitted_actors(&actions), vec![Some(3)], "a stopped actor's slot gets no call");
    }

    #[test]
    fn an_actor_pool_after_an_exchange_waits_for_its_tasks() {
        let shuffle = AllToAll::RandomShuffle { seed: Some(1), num_blocks: Some(2) };
        let pool = PoolSpec { min_size: 1, initial_size: 2, max_size: Some(2), per_actor: 1 };
        let specs = vec![
            (map_reads(3, 1), "Read".into(), vec![]),
            (OpSpec::AllToAll(shuffle), "Shuffle".into(), vec![0]),
            (
                OpSpec::Map { reads: None, batch_rows: None, concurrency: None, pool: Some(pool) },
                "Pool".into(),
                vec![1],
            ),
        ];
        let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
        let mut pending: Vec<TaskId> = submits(&exec.poll()).into_iter().map(|s| s.0).collect();
        let mut reduce_tasks = Vec::new();
        while let Some(task) = pending.pop() {
            exec.task_done(task, out(10, 1));
            for action in exec.poll() {
                assert!(!matches!(action, Action::StartActor { .. }), "an actor started while the exchange ran");
                if let Action::Shuffle { outputs, .. } = action {
                    reduce_tasks.extend(outputs.iter().map(|o| o.0));
                }
            }
        }
        assert_eq!(reduce_tasks.len(), 2);
        exec.task_done(reduce_tasks[0], out(15, 1));
        assert!(!exec.poll().iter().any(|a| matches!(a, Action::StartActor { .. })), "one reduce still runs");
        exec.task_done(reduce_tasks[1], out(15, 1));
        let actions = exec.poll();
        let starts = actions.iter().filter(|a| matches!(a, Action::StartActor { .. })).count();
        assert_eq!(starts, 2, "the pool starts once the exchange is over: {actions:?}");
    }

    #[test]
    fn an_exchange_of_data_large_beside_the_budget_makes_smaller_partitions() {
        let shuffle = |exec: &mut Executor| -> usize {
            let mut pending = Vec::new();
            loop {
                for action in exec.poll() {
                    match action {
                        Action::Submit { task, .. } => pending.push(task),
                        Action::Shuffle { outputs, .. } => return outputs.len(),
                        _ => {}
                    }
                }
                exec.task_done(pending.pop().expect("a read runs"), out(10, 8 << 20));
            }
        };
        let specs = || {
            let spec = AllToAll::RandomShuffle { seed: Some(7), num_blocks: None };
            vec![(map_reads(4, 1), "Read".into(), vec![]), (OpSpec::AllToAll(spec), "Sort".into(), vec![0])]
        };
        // 32 MiB in 4 blocks through an 8 MiB budget on 2 CPUs: partitions of 2 MiB.
        let mut exec = Executor::new(specs(), config(8 << 20, false)).unwrap();
        assert_eq!(shuffle(&mut exec), 16);
        // A budget that holds it: one partition per input block, as in Ray.
        let mut exec = Executor::new(specs(), config(1 << 30, false)).unwrap();
        assert_eq!(shuffle(&mut exec), 4);
    }

    #[test]
    fn shuffle_and_repartition_plan_their_tasks() {
        let shuffle = AllToAll::RandomShuffle { seed: Some(7), num_blocks: None };
        let specs =
            vec![(map_reads(3, 1), "Read".into(), vec![]), (OpSpec::AllToAll(shuffle), "Shuffle".into(), vec![0])];
        let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
        assert_eq!(drain(&mut exec, 10, 1, 0, &[]), vec![10, 10, 10]);
        let repartition = AllToAll::Repartition { num_blocks: Some(2), target_rows_per_block: None };
        let specs =
            vec![(map_reads(3, 1), "Read".into(), vec![]), (OpSpec::AllToAll(repartition), "Re".into(), vec![0])];
        let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
        let mut slices = None;
        let mut pending = Vec::new();
        while slices.is_none() {
            for action in exec.poll() {
                match action {
                    Action::Submit { task, .. } => pending.push(task),
                    Action::Slices { outputs, .. } => slices = Some(outputs),
                    _ => {}
                }
            }
            if let Some(task) = pending.pop() {
                exec.task_done(task, out(10, 1));
            }
        }
        let pieces: Vec<Vec<SlicePiece>> = slices.unwrap().into_iter().map(|o| o.1).collect();
        assert_eq!(pieces, vec![vec![(0, 0, 10), (1, 0, 5)], vec![(1, 5, 5), (2, 0, 10)]]);
    }

    #[test]
    fn randomize_block_order_is_seeded() {
        let order = |seed| {
            let spec = AllToAll::RandomizeBlockOrder { seed: Some(seed) };
            let specs = vec![(OpSpec::LocalRead, "Read".into(), vec![]), (OpSpec::AllToAll(spec), "R".into(), vec![0])];
            let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
            let mut ids = Vec::new();
            loop {
                let actions = exec.poll();
                if actions.is_empty() {
                    break;
                }
                for action in actions {
                    if let Action::PullLocal { op } = action {
                        if ids.len() < 8 {
                            ids.push(exec.local_block(op, 1, 1, 0.0));
                        } else {
                            exec.local_done(op);
                        }
                    }
                }
            }
            let out: Vec<u64> = std::iter::from_fn(|| exec.next_output()).map(|o| o.0).collect();
            out.iter().map(|b| ids.iter().position(|i| i == b).unwrap() as u64).collect::<Vec<_>>()
        };
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), (0..8).collect::<Vec<u64>>());
    }

    #[test]
    fn bad_topologies_are_refused() {
        assert!(Executor::new(vec![], config(1, false)).is_err());
        let dangling = vec![(map_reads(1, 1), "A".into(), vec![]), (map_reads(1, 1), "B".into(), vec![])];
        assert!(Executor::new(dangling, config(1, false)).is_err());
        let forward = vec![(map_inputs(None), "A".into(), vec![1]), (map_reads(1, 1), "B".into(), vec![])];
        assert!(Executor::new(forward, config(1, false)).is_err());
    }

    #[test]
    fn slice_pieces_cover_each_range() {
        assert_eq!(slice_pieces(&[4, 4], &[(2, 6), (6, 6)]), vec![vec![(0, 2, 2), (1, 0, 2)], vec![(0, 0, 0)]]);
    }
}
