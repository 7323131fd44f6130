//! Limits: pass blocks through until `n` rows, slice the last one, then cut
//! everything upstream off (cancelling its tasks and dropping its blocks).

use super::{Action, BundleId, Executor, Kind, TaskId};

impl Executor {
    pub(super) fn step_limit(&mut self, op: usize) -> bool {
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
    pub(super) fn cut_off(&mut self, op: usize) {
        self.ops[op].done = true;
        let inputs = self.ops[op].inputs.clone();
        for input in inputs {
            self.cancel(input);
        }
    }

    pub(super) fn cancel(&mut self, op: usize) {
        let inputs = self.ops[op].inputs.clone();
        for input in inputs {
            self.cancel(input);
        }
        let node = &mut self.ops[op];
        node.done = true;
        let mut dropped: Vec<BundleId> = node.out.drain(..).collect();
        match &mut node.kind {
            Kind::Map(map) => {
                dropped.extend(map.abandon());
            }
            Kind::AllToAll { gathered, outputs, .. } => {
                dropped.append(gathered);
                dropped.extend(outputs.iter().filter_map(|(_, b)| b.flatten()));
                outputs.clear();
            }
            _ => {}
        }
        let has_pool = matches!(&node.kind, Kind::Map(map) if map.has_pool());
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
}
