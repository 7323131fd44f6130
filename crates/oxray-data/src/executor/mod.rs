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
//!
//! This file holds the machine and what every operator shares (the budget,
//! bundles, polling, finishing); each kind of operator steps in its own file:
//! `map.rs` (tasks and actor pools), `limit.rs` (and cancelling upstream),
//! `all_to_all.rs` (shuffle, repartition, block order), `union.rs`; `stats.rs`
//! keeps what each did.

mod all_to_all;
mod limit;
mod map;
mod stats;
#[cfg(test)]
mod tests;
mod union;

pub use all_to_all::slice_pieces;
use map::MapState;
pub use stats::OpStats;
use std::collections::{HashMap, VecDeque};

pub type BundleId = u64;

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
    /// Every block the caller holds for this execution, by id: `(rows, bytes)`. An
    /// entry lives from the task or read that made it until `release` (the caller
    /// consumed it) or a `Release` action (the machine dropped it).
    bundles: HashMap<BundleId, (u64, u64)>,
    /// Tasks submitted and not yet reported, with what they reserved.
    tasks: HashMap<TaskId, Task>,
    next_id: u64,
    /// Bytes counted against `config.budget_bytes` now: every live bundle's bytes
    /// plus each running task's estimated output. Scheduling keeps it within the
    /// budget (one task per operator may always run, so nothing stalls).
    used: u64,
    /// The highest `used` reached, for stats and the memory tests.
    peak: u64,
    /// Actions queued since the last `poll`, in the order the caller performs them.
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
                    Kind::Map(MapState::new(reads, batch_rows, concurrency, pool, &config))
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
            Kind::Map(map) if map.wants_input() => Some(0),
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

    /// Task `task` finished with `output`; returns its output bundle, if it made blocks.
    pub fn task_done(&mut self, task: TaskId, output: TaskOutput) -> Option<BundleId> {
        let mut task = self.tasks.remove(&task)?;
        let op = task.op;
        self.unreserve(task.est);
        for bundle in std::mem::take(&mut task.inputs) {
            self.drop_bundle(bundle);
        }
        let bundle = (output.blocks > 0).then(|| self.new_bundle(output.rows, output.bytes));
        let stats = &mut self.ops[op].stats;
        stats.cpu_s += output.cpu_s;
        stats.task_wall_s += output.wall_s;
        stats.output(output.rows, output.bytes, output.blocks);
        match self.ops[op].kind {
            Kind::Map(_) => self.map_task_done(op, &task, bundle),
            Kind::AllToAll { .. } => self.all_to_all_task_done(op, task.seq, bundle),
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

    fn finish(&mut self, op: usize) {
        if self.ops[op].done {
            return;
        }
        self.ops[op].done = true;
        if let Kind::Map(map) = &self.ops[op].kind
            && map.has_pool()
        {
            self.actions.push(Action::StopActors { op, cancelled: false });
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
