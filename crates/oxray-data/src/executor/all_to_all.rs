//! All-to-all operators (exchanges): gather every input block, then shuffle,
//! repartition or reorder them as one round of tasks whose outputs go out in
//! order; `default_partitions` sizes an exchange the user did not size.

use super::{Action, AllToAll, BundleId, Executor, Kind, SlicePiece, Task, TaskId};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// The most partitions an exchange picks by itself for data large beside its budget.
const MAX_DEFAULT_PARTITIONS: u64 = 1000;

impl Executor {
    pub(super) fn step_all_to_all(&mut self, op: usize) -> bool {
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

    /// An exchange's output task finished: outputs go out in order.
    pub(super) fn all_to_all_task_done(&mut self, op: usize, seq: u64, bundle: Option<BundleId>) {
        let Kind::AllToAll { outputs, .. } = &mut self.ops[op].kind else {
            unreachable!("operator {op} is an exchange")
        };
        if let Some(slot) = outputs.iter_mut().find(|(id, _)| *id == seq) {
            slot.1 = Some(bundle);
        }
        let mut ready = Vec::new();
        while let Some((_, Some(_))) = outputs.front() {
            let (_, done) = outputs.pop_front().expect("a front entry");
            ready.extend(done.flatten());
        }
        self.ops[op].out.extend(ready);
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
